#pragma once
// dpdk mode's packet device: one (port, queue) of a DPDK ethdev port, as a PollableDevice for
// the userspace TCP stack (dataplane/tcp). Built only with INFERGATE_WITH_DPDK (libdpdk found).
//
// A DpdkPort configures and starts one port (rte_eth_dev_configure, one rx + one tx queue per
// reactor, RSS over IPv4/IPv6 + TCP when there is more than one queue, a private mbuf pool per
// queue) and owns the pools; a DpdkDevice is one queue of it, used by one reactor thread. EAL
// must be up first (eal.h).
//
// Frames are mbufs: rxBurst() hands out rte_eth_rx_burst()'s mbufs as Frame{data =
// rte_pktmbuf_mtod, len = data_len, handle = the rte_mbuf*}; rxRelease() frees them to their
// pool (bulk). txAlloc() takes an mbuf from the queue's pool (Frame::capacity = its tailroom);
// txBurst() sets data_len/pkt_len and hands them to rte_eth_tx_burst(); the PMD frees them when
// the NIC is done. Nothing is copied by the device, either way (docs/DPDK.md).
//
// Transmit back-pressure: frames the NIC's tx ring does not take are kept, in order, in a
// bounded pending list (DpdkPortOptions::tx_pending_max) and offered again by the next
// txBurst(), txFlush() or kick(); txPending() is true while any wait, so the reactor does not
// sleep on them. Past the bound, a frame is freed and counted (tx_dropped): TCP retransmits it.
// While the list is full, txAlloc() refuses (the stack counts tx_no_frame and retries later),
// which keeps that rare.
//
// Mbuf pool sizing (per queue), minMbufsPerQueue():
//   rx_desc            mbufs the NIC's rx ring keeps posted
// + burst              the frames of the rx burst being handled
// + hold_frames        received frames the stack may keep (rxHoldBudget(): out-of-order data)
// + tx_desc            sent mbufs the PMD frees lazily (tx_free_thresh) from its tx ring
// + tx_pending_max     frames waiting for room in the tx ring
// + burst              tx frames allocated by the stack but not yet passed to txBurst()
// + mbuf_cache * 3 / 2 what the reactor's per-lcore mempool cache may keep (its flush mark)
// so held frames and frames in transmission never starve the rx ring. configure() refuses a
// pool below that figure, naming it.
//
// Checksums (docs/DPDK.md "Checksum offload"): with DpdkPortOptions::checksum_offload kAuto
// (the default) the port's IPv4 + TCP checksum offloads are used where it reports them, each
// direction on its own; kOff, or a port without them, leaves every checksum to the stack.
//   tx (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM and _TCP_CKSUM both reported, both enabled in
//     txmode.offloads): txChecksumOffload() is true, so the stack leaves the IPv4 header
//     checksum 0 and the pseudo-header sum in the TCP field and marks the frame
//     (kMetaTxChecksumOffload, packet_io.h); txBurst() sets that mbuf's ol_flags
//     (RTE_MBUF_F_TX_IPV4 | IP_CKSUM | TCP_CKSUM, or TX_IPV6 | TCP_CKSUM), l2_len 14 and l3_len
//     20 / 40, and runs rte_eth_tx_prepare(); a frame the PMD's prepare refuses gets its
//     checksums in software and no flags (counted tx_checksum_fallbacks). Frames not marked
//     (the L2 responder's ARP / ICMP answers) go out with their software checksums, no flags.
//   rx (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM and _TCP_CKSUM both reported, both enabled in
//     rxmode.offloads): per mbuf, a BAD IP or L4 flag is a counted drop here (rx_checksum_bad),
//     before anything else sees the frame; GOOD sets kMetaRxIpChecksumGood /
//     kMetaRxL4ChecksumGood in Frame::meta and the stack skips that verification; UNKNOWN and
//     NONE set nothing (the stack verifies in software). Without rx offload the flags are not
//     read at all.
// DpdkPortOptions::emulate_checksum_offload is the tests' seam: net_ring (and net_af_packet)
// report no offload, so the tests make the device behave as if the port had both directions
// (nothing is enabled on the port) and play the NIC themselves. The fast-free transmit offload
// (RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE) is asked for where the port has it: every mbuf a queue
// transmits comes from txAlloc() (that queue's pool, one reference), so nothing else may be
// passed to txBurst().
//
// Polling: DPDK has no descriptor to sleep on: fd() is -1, and the reactor must spin
// (rxBurst() is the poll; busyPoll() does nothing).
//
// Threading: DpdkPort::configure() and its destructor on one control thread, before the devices
// are created and after they are gone. A DpdkDevice belongs to one reactor thread (PacketDevice
// rules); on its first rxBurst()/txAlloc() on a thread that is not an EAL lcore it registers that
// thread with EAL (rte_thread_register: the mempool's per-lcore cache then serves it); stats()
// may be read from another thread (plain counters, possibly stale).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/xsk/pollable_device.h"

struct rte_mempool;
struct rte_mbuf;

namespace infergate::dataplane::dpdk {

enum class Promiscuous { kAuto, kOn, kOff };  // kAuto: on for virtual devices (vdev bus)
enum class ChecksumOffload { kAuto, kOff };  // kAuto: what the port reports (dpdk.checksum_offload)

struct DpdkPortOptions {
  uint16_t port_id = 0;
  uint16_t queues = 1;  // rx/tx queue pairs: one per reactor
  uint16_t rx_desc = 1024, tx_desc = 1024;
  uint32_t mbufs_per_queue = 8192;  // the pool of each queue; >= minMbufsPerQueue()
  uint32_t mbuf_cache = 256;        // per-lcore mempool cache (0: none)
  uint32_t mtu = 1500;              // IP MTU of the port
  bool rss = true;                  // spread flows over the queues (queues > 1)
  uint32_t hold_frames = 1024;      // per queue: received frames the stack may keep
  uint32_t tx_pending_max = 1024;   // per queue: refused tx frames kept for a retry
  uint32_t burst = 64;              // frames per burst (the reactor's), for the pool sizing
  Promiscuous promiscuous = Promiscuous::kAuto;
  ChecksumOffload checksum_offload = ChecksumOffload::kAuto;
  // Tests only (tests/unit/dpdk): behave as if the port reported IPv4 + TCP checksum offload
  // both ways, without enabling anything on it; the test completes the tx checksums and sets
  // the rx flags itself. Never set it for a real port: nothing would compute the checksums.
  bool emulate_checksum_offload = false;
};

// What the port is and could do, as configured.
struct PortCaps {
  bool tx_ip_cksum = false;       // the port could compute IPv4 header checksums on transmit
  bool tx_tcp_cksum = false;      // ... TCP checksums on transmit
  bool rx_cksum = false;          // ... verify IPv4 + TCP checksums on receive
  bool tx_checksum_offload = false;  // in use: the NIC completes IPv4 + TCP checksums on tx
  bool rx_checksum_offload = false;  // in use: the NIC's GOOD / BAD flags are honoured on rx
  bool checksum_emulated = false;    // the two above come from emulate_checksum_offload (tests)
  std::string driver;             // rte_eth_dev_info::driver_name ("net_ring", "net_ice"...)
  std::string name;               // the device's name ("net_ring0", "0000:3b:00.1")
  bool vdev = false;              // a virtual device (vdev bus)
  bool promiscuous = false;
  bool rss = false;     // RSS configured (queues > 1 and the port hashes IP/TCP)
  uint64_t rss_hf = 0;  // the hash functions in use (RTE_ETH_RSS_*)
  uint16_t max_rx_queues = 0, max_tx_queues = 0;
  uint16_t rx_desc = 0, tx_desc = 0;  // after rte_eth_dev_adjust_nb_rx_tx_desc
  uint32_t mtu = 0;
  uint32_t mbuf_data_room = 0;  // bytes of each mbuf's buffer (headroom included)
  uint8_t mac[6] = {};
};

// One line for logs: which checksums are offloaded, the setting, what the port reports.
std::string checksumSummary(const PortCaps& caps, ChecksumOffload setting);

// The least pool size per queue for `options` (the sizing rule above).
uint32_t minMbufsPerQueue(const DpdkPortOptions& options);

// Configures and starts `options.port_id` with `options.queues` queue pairs, creating one mbuf
// pool per queue into `*pools` (pools[q] serves rx and tx queue q). On error nothing is left
// started and no pool is left created. Errors name the port, what is wrong and the fix: no such
// port (with the ports EAL found), a queue count the port cannot have, no RSS for several
// queues, an MTU the port refuses, a pool too small or out of memory, and ethdev's own failures
// (rte_strerror). The caller stops the port (stopPort) before it frees the pools.
absl::StatusOr<PortCaps> configurePort(const DpdkPortOptions& options,
                                       std::vector<rte_mempool*>* pools);
// Stops the port (the PMD returns its rx ring's mbufs to the pools) and frees `*pools`.
void stopPort(uint16_t port_id, std::vector<rte_mempool*>* pools);

// A configured, started port and its pools (configurePort/stopPort with an owner).
class DpdkPort {
 public:
  static absl::StatusOr<std::unique_ptr<DpdkPort>> configure(const DpdkPortOptions& options);
  // Stops the port and frees the pools: every DpdkDevice of the port must be gone first, and
  // every frame released.
  ~DpdkPort();
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  uint16_t portId() const { return options_.port_id; }
  uint16_t queues() const { return options_.queues; }
  const DpdkPortOptions& options() const { return options_; }
  const PortCaps& caps() const { return caps_; }
  rte_mempool* pool(uint16_t queue) const { return pools_.at(queue); }

 private:
  DpdkPort(const DpdkPortOptions& o, PortCaps caps, std::vector<rte_mempool*> pools)
      : options_(o), caps_(std::move(caps)), pools_(std::move(pools)) {}
  DpdkPortOptions options_;
  PortCaps caps_;
  std::vector<rte_mempool*> pools_;
};

struct DpdkStats {
  uint64_t rx_packets = 0, rx_bytes = 0;  // frames handed to the caller
  uint64_t rx_dropped_chained = 0;        // multi-segment mbufs (never with the pool sizing): freed
  uint64_t tx_packets = 0, tx_bytes = 0;  // frames the NIC's tx ring took
  uint64_t tx_deferred = 0;         // frames the tx ring refused at first (to the pending list)
  uint64_t tx_retries = 0;          // rte_eth_tx_burst calls for the pending list
  uint64_t tx_dropped = 0;          // frames freed because the pending list was full (or at close)
  uint64_t tx_alloc_failed = 0;     // txAlloc() refused: pool empty or pending list full
  uint64_t rx_outstanding = 0;      // gauge: rx frames with the caller (burst + held)
  uint64_t rx_outstanding_max = 0;  // the most ever at once
  uint64_t tx_pending = 0;          // gauge: frames in the pending list
  // Checksum offload (all 0 while it is off).
  uint64_t rx_checksum_bad = 0;        // frames the NIC flagged BAD (IP or L4): freed, not seen
  uint64_t rx_checksum_good = 0;       // frames whose TCP/L4 checksum the NIC verified
  uint64_t rx_checksum_unknown = 0;    // L4 flag neither GOOD nor BAD: verified in software
  uint64_t tx_checksum_offloaded = 0;  // frames sent with the offload flags
  uint64_t tx_checksum_fallbacks = 0;  // refused by rte_eth_tx_prepare: summed in software
};

class DpdkDevice final : public PollableDevice {
 public:
  // Queue `queue` of `port` (which must outlive the device). Errors: queue out of range.
  static absl::StatusOr<std::unique_ptr<DpdkDevice>> open(DpdkPort& port, uint16_t queue);
  // Frees the pending frames (counted tx_dropped). Frames the caller still holds are not
  // freed here: release them first.
  ~DpdkDevice() override;
  DpdkDevice(const DpdkDevice&) = delete;
  DpdkDevice& operator=(const DpdkDevice&) = delete;

  // PacketDevice
  size_t rxBurst(Frame* frames, size_t max) override;
  void rxRelease(const Frame* frames, size_t n) override;
  uint32_t rxHoldBudget() const override { return hold_frames_; }
  bool txAlloc(Frame* frame) override;
  void txBurst(Frame* frames, size_t n) override;
  void txFlush() override;
  uint32_t mtu() const override { return mtu_; }
  bool txChecksumOffload() const override { return tx_offload_; }

  // PollableDevice
  int fd() const override { return -1; }  // nothing to sleep on: spin
  void kick() override;                   // offers the pending frames again
  bool txPending() const override { return !pending_.empty(); }
  void busyPoll() override {}  // rxBurst() polls the NIC itself

  uint16_t portId() const { return port_id_; }
  uint16_t queue() const { return queue_; }
  const DpdkStats& stats() const { return stats_; }
  // Free mbufs in the queue's pool right now, lcore caches included (tests: every mbuf comes
  // back).
  uint32_t poolAvailable() const;
  rte_mempool* pool() const { return pool_; }

 private:
  DpdkDevice(const DpdkPort& port, uint16_t queue);
  void ensureThread();
  // Offers `n` mbufs to the NIC; returns how many it took (counted).
  uint16_t send(rte_mbuf** mbufs, uint16_t n);
  // Offers the pending list again, oldest first; true when it is empty afterwards.
  bool retryPending();
  // Appends to the pending list up to its bound; frees and counts the rest.
  void defer(rte_mbuf** mbufs, size_t n);
  // The offload fields of a marked frame's mbuf (ol_flags, l2_len, l3_len).
  void markOffload(rte_mbuf* m);
  // rte_eth_tx_prepare over `n` marked mbufs; one it refuses is finished in software.
  void prepareOffload(rte_mbuf** mbufs, uint16_t n);

  uint16_t port_id_;
  uint16_t queue_;
  rte_mempool* pool_;
  uint32_t hold_frames_;
  uint32_t pending_max_;
  uint32_t mtu_;
  bool tx_offload_;                 // PortCaps::tx_checksum_offload
  bool rx_offload_;                 // PortCaps::rx_checksum_offload
  std::vector<rte_mbuf*> pending_;  // refused tx frames, oldest first; capacity pending_max_
  bool warned_register_ = false;
  DpdkStats stats_;
};

}  // namespace infergate::dataplane::dpdk
