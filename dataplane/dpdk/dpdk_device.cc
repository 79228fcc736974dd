#include "dataplane/dpdk/dpdk_device.h"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_prefetch.h>
#include <rte_tcp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "dataplane/dpdk/eal.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace infergate::dataplane::dpdk {
namespace {

constexpr uint16_t kChunk = 64;  // mbuf pointers gathered on the stack per ethdev/mempool call

// Ethernet header + CRC + one VLAN tag around an IP MTU.
constexpr uint32_t kFrameOverhead = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN + 4;

std::string errText(int rc) {
  const int e = rc < 0 ? -rc : rc;
  return fmt::format("{} ({})", rte_strerror(e), e);
}

std::string portName(uint16_t port) {
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  if (rte_eth_dev_get_name_by_port(port, name) != 0) return "?";
  return name;
}

std::string availablePorts() {
  std::string out;
  uint16_t p;
  RTE_ETH_FOREACH_DEV(p) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} ({})", p, portName(p));
  }
  return out.empty() ? "none" : out;
}

uint32_t dataRoomFor(uint32_t mtu) {
  const uint32_t frame = mtu + kFrameOverhead;
  const uint32_t room = std::max<uint32_t>(RTE_MBUF_DEFAULT_DATAROOM, (frame + 127) & ~127u);
  return room + RTE_PKTMBUF_HEADROOM;
}

std::atomic<uint32_t> g_pool_generation{0};

}  // namespace

std::string checksumSummary(const PortCaps& c, ChecksumOffload setting) {
  auto dir = [&](bool on) {
    if (on)
      return std::string(c.checksum_emulated ? "offloaded (emulated for tests)" : "offloaded");
    return std::string("in software");
  };
  return fmt::format(
      "checksums: tx {}, rx {} (dpdk.checksum_offload {}; the port reports tx ipv4 {} tcp {}, "
      "rx ipv4+tcp {})",
      dir(c.tx_checksum_offload), dir(c.rx_checksum_offload),
      setting == ChecksumOffload::kAuto ? "auto" : "off", c.tx_ip_cksum ? "yes" : "no",
      c.tx_tcp_cksum ? "yes" : "no", c.rx_cksum ? "yes" : "no");
}

uint32_t minMbufsPerQueue(const DpdkPortOptions& o) {
  return uint32_t{o.rx_desc} + o.burst + o.hold_frames + o.tx_desc + o.tx_pending_max + o.burst +
         o.mbuf_cache * 3 / 2;
}

absl::StatusOr<PortCaps> configurePort(const DpdkPortOptions& o, std::vector<rte_mempool*>* pools) {
  pools->clear();
  if (!ealReady())
    return absl::FailedPreconditionError("dpdk: EAL is not initialised (initEal first)");
  const uint16_t port = o.port_id;
  if (!rte_eth_dev_is_valid_port(port))
    return absl::NotFoundError(fmt::format(
        "dpdk: no port {} (EAL found: {}); check dpdk.vdevs / dpdk.allow_pci and that the NIC is "
        "bound to a DPDK-capable driver (dpdk-devbind.py --status)",
        port, availablePorts()));
  if (o.queues == 0) return absl::InvalidArgumentError("dpdk: queues must be at least 1");
  if (o.rx_desc == 0 || o.tx_desc == 0)
    return absl::InvalidArgumentError("dpdk: rx_desc and tx_desc must be positive");

  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(port, &info);
  if (rc != 0)
    return absl::InternalError(
        fmt::format("dpdk: port {}: rte_eth_dev_info_get: {}", port, errText(rc)));
  PortCaps caps;
  caps.driver = info.driver_name ? info.driver_name : "?";
  caps.name = info.device ? rte_dev_name(info.device) : portName(port);
  const rte_bus* bus = info.device ? rte_dev_bus(info.device) : nullptr;
  caps.vdev = bus && std::strcmp(rte_bus_name(bus), "vdev") == 0;
  caps.max_rx_queues = info.max_rx_queues;
  caps.max_tx_queues = info.max_tx_queues;
  caps.tx_ip_cksum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  caps.tx_tcp_cksum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  caps.rx_cksum =
      (info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM)) ==
      (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
  const std::string who = fmt::format("port {} ({}, {})", port, caps.name, caps.driver);

  if (o.queues > info.max_rx_queues || o.queues > info.max_tx_queues)
    return absl::FailedPreconditionError(fmt::format(
        "dpdk: {} has at most {} rx and {} tx queue(s) but {} were asked (one per reactor): set "
        "reactors to at most {}",
        who, info.max_rx_queues, info.max_tx_queues, o.queues,
        std::min(info.max_rx_queues, info.max_tx_queues)));
  if (o.mtu < info.min_mtu || o.mtu > info.max_mtu)
    return absl::FailedPreconditionError(
        fmt::format("dpdk: {} takes an MTU of {} to {}, not {}: set dpdk.mtu within that range",
                    who, info.min_mtu, info.max_mtu, o.mtu));
  const uint32_t data_room = dataRoomFor(o.mtu);
  if (data_room > UINT16_MAX)
    return absl::InvalidArgumentError(fmt::format("dpdk: MTU {} is too large for an mbuf", o.mtu));
  if (info.max_rx_pktlen != 0 && o.mtu + kFrameOverhead - 4 > info.max_rx_pktlen)
    return absl::FailedPreconditionError(
        fmt::format("dpdk: {} receives frames of at most {} bytes: too small for MTU {}", who,
                    info.max_rx_pktlen, o.mtu));
  const uint32_t need = minMbufsPerQueue(o);
  if (o.mbufs_per_queue < need)
    return absl::InvalidArgumentError(fmt::format(
        "dpdk: mbufs_per_queue {} is below what a queue needs ({} = rx_desc {} + burst {} + "
        "held frames {} + tx_desc {} + tx pending {} + burst {} + 1.5 x mbuf_cache {}): raise "
        "mbufs_per_queue or lower the others",
        o.mbufs_per_queue, need, o.rx_desc, o.burst, o.hold_frames, o.tx_desc, o.tx_pending_max,
        o.burst, o.mbuf_cache));
  if (o.mbuf_cache > RTE_MEMPOOL_CACHE_MAX_SIZE || o.mbuf_cache > o.mbufs_per_queue / 1.5)
    return absl::InvalidArgumentError(
        fmt::format("dpdk: mbuf_cache {} is too large (at most {} and mbufs_per_queue / 1.5)",
                    o.mbuf_cache, RTE_MEMPOOL_CACHE_MAX_SIZE));

  rte_eth_conf conf{};
  conf.rxmode.mtu = o.mtu;
  conf.rxmode.mq_mode = RTE_ETH_MQ_RX_NONE;
  if (o.queues > 1 && o.rss) {
    const uint64_t want = RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP;
    caps.rss_hf = want & info.flow_type_rss_offloads;
    if (caps.rss_hf == 0)
      return absl::FailedPreconditionError(fmt::format(
          "dpdk: {} cannot spread flows over {} queues (no RSS over IP/TCP; it hashes 0x{:x}): "
          "set reactors: 1",
          who, o.queues, info.flow_type_rss_offloads));
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_key = nullptr;  // the PMD's default key
    conf.rx_adv_conf.rss_conf.rss_hf = caps.rss_hf;
    caps.rss = true;
  } else if (o.queues > 1) {
    spdlog::warn("dpdk: {}: RSS off with {} queues: every flow arrives on queue 0", who, o.queues);
  }
  // Checksum offload where the port reports it (each direction needs IPv4 and TCP both), or as
  // the tests emulate it (nothing asked of the port). Fast free: every mbuf a queue transmits
  // comes from that queue's pool with a reference count of 1.
  const bool use_cksum = o.checksum_offload == ChecksumOffload::kAuto;
  const bool tx_hw = use_cksum && caps.tx_ip_cksum && caps.tx_tcp_cksum;
  const bool rx_hw = use_cksum && caps.rx_cksum;
  caps.tx_checksum_offload = tx_hw || (use_cksum && o.emulate_checksum_offload);
  caps.rx_checksum_offload = rx_hw || (use_cksum && o.emulate_checksum_offload);
  caps.checksum_emulated = use_cksum && o.emulate_checksum_offload && !(tx_hw && rx_hw);
  conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
  if (tx_hw) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  conf.rxmode.offloads = rx_hw ? RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM : 0;

  rc = rte_eth_dev_configure(port, o.queues, o.queues, &conf);
  if (rc != 0)
    return absl::FailedPreconditionError(
        fmt::format("dpdk: configuring {} with {} queue pair(s): {}", who, o.queues, errText(rc)));
  uint16_t rx_desc = o.rx_desc, tx_desc = o.tx_desc;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rx_desc, &tx_desc);
  if (rc != 0)
    return absl::FailedPreconditionError(fmt::format("dpdk: {}: descriptor counts {}/{}: {}", who,
                                                     o.rx_desc, o.tx_desc, errText(rc)));
  if (rx_desc > o.rx_desc || tx_desc > o.tx_desc)
    // More descriptors than the pool was sized for: the sizing rule would not hold.
    return absl::FailedPreconditionError(
        fmt::format("dpdk: {} needs at least {} rx and {} tx descriptors: set dpdk.rx_desc/tx_desc",
                    who, rx_desc, tx_desc));
  caps.rx_desc = rx_desc;
  caps.tx_desc = tx_desc;
  caps.mbuf_data_room = data_room;
  int socket = rte_eth_dev_socket_id(port);
  if (socket < 0) socket = SOCKET_ID_ANY;

  auto fail = [&](absl::Status s) {
    for (rte_mempool* mp : *pools) rte_mempool_free(mp);
    pools->clear();
    return s;
  };
  const uint32_t gen = g_pool_generation.fetch_add(1, std::memory_order_relaxed);
  for (uint16_t q = 0; q < o.queues; ++q) {
    const std::string name = fmt::format("ig{}_{}_{}", port, q, gen);
    rte_mempool* mp = rte_pktmbuf_pool_create(name.c_str(), o.mbufs_per_queue, o.mbuf_cache, 0,
                                              static_cast<uint16_t>(data_room), socket);
    if (mp == nullptr)
      return fail(absl::ResourceExhaustedError(
          fmt::format("dpdk: {} queue {}: cannot create a pool of {} mbufs of {} bytes: {} (raise "
                      "dpdk.memory_mb or the hugepages reserved, or lower dpdk.mbufs_per_queue)",
                      who, q, o.mbufs_per_queue, data_room, errText(rte_errno))));
    pools->push_back(mp);
    rc = rte_eth_rx_queue_setup(port, q, rx_desc, static_cast<unsigned>(socket), nullptr, mp);
    if (rc != 0)
      return fail(absl::FailedPreconditionError(
          fmt::format("dpdk: {} rx queue {} ({} descriptors): {}", who, q, rx_desc, errText(rc))));
    rc = rte_eth_tx_queue_setup(port, q, tx_desc, static_cast<unsigned>(socket), nullptr);
    if (rc != 0)
      return fail(absl::FailedPreconditionError(
          fmt::format("dpdk: {} tx queue {} ({} descriptors): {}", who, q, tx_desc, errText(rc))));
  }
  const bool promisc =
      o.promiscuous == Promiscuous::kOn || (o.promiscuous == Promiscuous::kAuto && caps.vdev);
  if (promisc) {
    rc = rte_eth_promiscuous_enable(port);
    if (rc != 0 && rc != -ENOTSUP)
      spdlog::warn("dpdk: {}: promiscuous mode not enabled: {}", who, errText(rc));
  }
  rc = rte_eth_dev_start(port);
  if (rc != 0)
    return fail(
        absl::FailedPreconditionError(fmt::format("dpdk: starting {}: {}", who, errText(rc))));
  caps.promiscuous = rte_eth_promiscuous_get(port) == 1;
  uint16_t mtu = 0;
  caps.mtu = rte_eth_dev_get_mtu(port, &mtu) == 0 ? mtu : o.mtu;
  rte_ether_addr mac{};
  if (rte_eth_macaddr_get(port, &mac) == 0) std::memcpy(caps.mac, mac.addr_bytes, 6);
  spdlog::info(
      "dpdk: {} started: {} queue pair(s) ({} rx / {} tx descriptors, {} mbufs of {} "
      "bytes each), RSS {}, MTU {}, promiscuous {}, {}",
      who, o.queues, rx_desc, tx_desc, o.mbufs_per_queue, data_room,
      caps.rss ? fmt::format("0x{:x}", caps.rss_hf) : std::string("off"), caps.mtu,
      caps.promiscuous ? "on" : "off", checksumSummary(caps, o.checksum_offload));
  return caps;
}

void stopPort(uint16_t port_id, std::vector<rte_mempool*>* pools) {
  if (rte_eth_dev_is_valid_port(port_id)) {
    const int rc = rte_eth_dev_stop(port_id);
    if (rc != 0) spdlog::warn("dpdk: stopping port {}: {}", port_id, errText(rc));
  }
  for (rte_mempool* mp : *pools) rte_mempool_free(mp);
  pools->clear();
}

absl::StatusOr<std::unique_ptr<DpdkPort>> DpdkPort::configure(const DpdkPortOptions& o) {
  std::vector<rte_mempool*> pools;
  absl::StatusOr<PortCaps> caps = configurePort(o, &pools);
  if (!caps.ok()) return caps.status();
  return std::unique_ptr<DpdkPort>(new DpdkPort(o, std::move(*caps), std::move(pools)));
}

DpdkPort::~DpdkPort() { stopPort(options_.port_id, &pools_); }

DpdkDevice::DpdkDevice(const DpdkPort& port, uint16_t queue)
    : port_id_(port.portId()),
      queue_(queue),
      pool_(port.pool(queue)),
      hold_frames_(port.options().hold_frames),
      pending_max_(port.options().tx_pending_max),
      mtu_(port.caps().mtu),
      tx_offload_(port.caps().tx_checksum_offload),
      rx_offload_(port.caps().rx_checksum_offload) {
  pending_.reserve(pending_max_);
}

absl::StatusOr<std::unique_ptr<DpdkDevice>> DpdkDevice::open(DpdkPort& port, uint16_t queue) {
  if (queue >= port.queues())
    return absl::InvalidArgumentError(fmt::format("dpdk: port {} has {} queue(s): no queue {}",
                                                  port.portId(), port.queues(), queue));
  return std::unique_ptr<DpdkDevice>(new DpdkDevice(port, queue));
}

DpdkDevice::~DpdkDevice() {
  if (!pending_.empty()) {
    stats_.tx_dropped += pending_.size();
    rte_pktmbuf_free_bulk(pending_.data(), static_cast<unsigned>(pending_.size()));
    pending_.clear();
  }
}

uint32_t DpdkDevice::poolAvailable() const { return rte_mempool_avail_count(pool_); }

void DpdkDevice::ensureThread() {
  // A thread-local read; registration happens once per thread.
  if (rte_lcore_id() != LCORE_ID_ANY) return;
  if (rte_thread_register() != 0 && !warned_register_) {
    warned_register_ = true;
    spdlog::warn(
        "dpdk: port {} queue {}: cannot register the reactor thread with EAL ({}): "
        "its mempool operations bypass the per-lcore cache",
        port_id_, queue_, rte_strerror(rte_errno));
  }
}

size_t DpdkDevice::rxBurst(Frame* frames, size_t max) {
  ensureThread();
  size_t out = 0;
  rte_mbuf* mbufs[kChunk];
  while (out < max) {
    const uint16_t want = static_cast<uint16_t>(std::min<size_t>(max - out, kChunk));
    const uint16_t n = rte_eth_rx_burst(port_id_, queue_, mbufs, want);
    for (uint16_t i = 0; i < n; ++i) {
      rte_mbuf* m = mbufs[i];
      if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(mbufs[i + 1], void*));
      if (m->nb_segs != 1) {
        // The stack needs a frame in one piece; the pool's buffers hold a whole MTU frame.
        ++stats_.rx_dropped_chained;
        rte_pktmbuf_free(m);
        continue;
      }
      uint64_t meta = 0;
      if (rx_offload_) {
        // Only an explicit GOOD spares the stack a sum; BAD never reaches it.
        const uint64_t ip = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
        const uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
        if (ip == RTE_MBUF_F_RX_IP_CKSUM_BAD || l4 == RTE_MBUF_F_RX_L4_CKSUM_BAD) {
          ++stats_.rx_checksum_bad;
          rte_pktmbuf_free(m);
          continue;
        }
        if (ip == RTE_MBUF_F_RX_IP_CKSUM_GOOD) meta |= kMetaRxIpChecksumGood;
        if (l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD) {
          meta |= kMetaRxL4ChecksumGood;
          ++stats_.rx_checksum_good;
        } else {
          ++stats_.rx_checksum_unknown;
        }
      }
      Frame& f = frames[out++];
      f.data = rte_pktmbuf_mtod(m, uint8_t*);
      f.len = m->data_len;
      f.capacity = m->data_len;
      f.handle = reinterpret_cast<uintptr_t>(m);
      f.meta = meta;
      stats_.rx_bytes += m->data_len;
      ++stats_.rx_packets;
      ++stats_.rx_outstanding;
    }
    if (n < want) break;
  }
  if (stats_.rx_outstanding > stats_.rx_outstanding_max)
    stats_.rx_outstanding_max = stats_.rx_outstanding;
  return out;
}

void DpdkDevice::rxRelease(const Frame* frames, size_t n) {
  rte_mbuf* mbufs[kChunk];
  for (size_t done = 0; done < n;) {
    const size_t k = std::min<size_t>(n - done, kChunk);
    for (size_t i = 0; i < k; ++i) mbufs[i] = reinterpret_cast<rte_mbuf*>(frames[done + i].handle);
    rte_pktmbuf_free_bulk(mbufs, static_cast<unsigned>(k));
    done += k;
  }
  stats_.rx_outstanding -= n;
}

bool DpdkDevice::txAlloc(Frame* frame) {
  ensureThread();
  if (pending_max_ > 0 && pending_.size() >= pending_max_) {
    retryPending();
    if (pending_.size() >= pending_max_) {
      ++stats_.tx_alloc_failed;  // the NIC is not taking frames: push back on the stack
      return false;
    }
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    ++stats_.tx_alloc_failed;
    return false;
  }
  frame->data = rte_pktmbuf_mtod(m, uint8_t*);
  frame->len = 0;
  frame->capacity = rte_pktmbuf_tailroom(m);
  frame->handle = reinterpret_cast<uintptr_t>(m);
  frame->meta = 0;
  return true;
}

uint16_t DpdkDevice::send(rte_mbuf** mbufs, uint16_t n) {
  const uint16_t sent = rte_eth_tx_burst(port_id_, queue_, mbufs, n);
  for (uint16_t i = 0; i < sent; ++i) stats_.tx_bytes += mbufs[i]->pkt_len;
  stats_.tx_packets += sent;
  return sent;
}

bool DpdkDevice::retryPending() {
  size_t done = 0;
  while (done < pending_.size()) {
    const uint16_t k = static_cast<uint16_t>(std::min<size_t>(pending_.size() - done, UINT16_MAX));
    ++stats_.tx_retries;
    const uint16_t sent = send(pending_.data() + done, k);
    done += sent;
    if (sent < k) break;  // the ring is full again
  }
  if (done > 0) pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(done));
  stats_.tx_pending = pending_.size();
  return pending_.empty();
}

void DpdkDevice::defer(rte_mbuf** mbufs, size_t n) {
  const size_t room = pending_max_ - std::min<size_t>(pending_.size(), pending_max_);
  const size_t keep = std::min(n, room);
  pending_.insert(pending_.end(), mbufs, mbufs + keep);
  stats_.tx_deferred += keep;
  if (keep < n) {
    stats_.tx_dropped += n - keep;
    rte_pktmbuf_free_bulk(mbufs + keep, static_cast<unsigned>(n - keep));
  }
  stats_.tx_pending = pending_.size();
}

void DpdkDevice::txBurst(Frame* frames, size_t n) {
  rte_mbuf* mbufs[kChunk];
  // Frames refused earlier go first (order on the wire is kept).
  bool clear = pending_.empty() || retryPending();
  for (size_t done = 0; done < n;) {
    const uint16_t k = static_cast<uint16_t>(std::min<size_t>(n - done, kChunk));
    uint16_t marked = 0;
    for (uint16_t i = 0; i < k; ++i) {
      const Frame& f = frames[done + i];
      rte_mbuf* m = reinterpret_cast<rte_mbuf*>(f.handle);
      m->data_len = static_cast<uint16_t>(f.len);
      m->pkt_len = f.len;
      m->ol_flags = 0;
      // The stack marks frames only when txChecksumOffload() is true.
      if (tx_offload_ && (f.meta & kMetaTxChecksumOffload)) {
        markOffload(m);
        ++marked;
      }
      mbufs[i] = m;
    }
    if (marked > 0) prepareOffload(mbufs, k);
    done += k;
    const uint16_t sent = clear ? send(mbufs, k) : 0;
    if (sent < k) {
      defer(mbufs + sent, k - sent);
      clear = false;
    }
  }
}

void DpdkDevice::markOffload(rte_mbuf* m) {
  const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
  const bool v6 = p[12] == 0x86 && p[13] == 0xdd;  // the stack's own frames: no VLAN tag
  m->l2_len = RTE_ETHER_HDR_LEN;
  m->l3_len = v6 ? sizeof(rte_ipv6_hdr) : sizeof(rte_ipv4_hdr);
  m->ol_flags = v6 ? RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_TCP_CKSUM
                   : RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM;
  ++stats_.tx_checksum_offloaded;
}

void DpdkDevice::prepareOffload(rte_mbuf** mbufs, uint16_t n) {
  for (uint16_t at = 0; at < n;) {
    at += rte_eth_tx_prepare(port_id_, queue_, mbufs + at, n - at);
    if (at >= n) break;
    // The PMD cannot offload this one: finish it in software and send it without flags.
    rte_mbuf* m = mbufs[at++];
    uint8_t* p = rte_pktmbuf_mtod(m, uint8_t*);
    rte_tcp_hdr* tcp = reinterpret_cast<rte_tcp_hdr*>(p + m->l2_len + m->l3_len);
    tcp->cksum = 0;
    if (m->ol_flags & RTE_MBUF_F_TX_IPV6) {
      tcp->cksum = rte_ipv6_udptcp_cksum(reinterpret_cast<rte_ipv6_hdr*>(p + m->l2_len), tcp);
    } else {
      rte_ipv4_hdr* ip = reinterpret_cast<rte_ipv4_hdr*>(p + m->l2_len);
      ip->hdr_checksum = 0;
      ip->hdr_checksum = rte_ipv4_cksum(ip);
      tcp->cksum = rte_ipv4_udptcp_cksum(ip, tcp);
    }
    m->ol_flags = 0;
    --stats_.tx_checksum_offloaded;
    ++stats_.tx_checksum_fallbacks;
  }
}

void DpdkDevice::txFlush() {
  if (!pending_.empty()) retryPending();
}

void DpdkDevice::kick() { txFlush(); }

}  // namespace infergate::dataplane::dpdk
