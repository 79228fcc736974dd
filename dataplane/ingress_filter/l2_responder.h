#pragma once
// dpdk mode's answers to what a kernel would answer on a port that has no kernel behind it:
// ARP requests for the configured IPv4 address, ICMP echo requests to it, and for the
// configured IPv6 address ICMPv6 echo requests and neighbour solicitations (a neighbour
// advertisement with our MAC). Nothing is learnt: the TCP stack answers each segment to the
// MAC it came from. Everything else is left to the caller (FilteringDevice drops and counts
// it). Untagged frames or one 802.1Q / 802.1ad tag, kept in the answer.
//
// Replies go out through the wrapped device: handle() builds each one in a txAlloc() frame
// and queues it, flush() hands the queue to txBurst() and kicks with txFlush() (once per
// burst). At most max_replies_per_burst are queued between flushes; over that, or without a
// free transmit frame, the request is not answered and counted (a flood of pings costs at
// most that much transmit work per burst).
//
// Checksums are computed in software in full (replies are small); a request whose IPv4
// header, ICMP or ICMPv6 checksum is wrong is not answered (counted as malformed).
//
// Ownership: the device is referenced and must outlive the responder; frames passed to
// handle() stay the caller's. Threading: the reactor thread, except counters() (any thread).

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/packet_io.h"

namespace infergate::dataplane::ingress_filter {

struct L2Options {
  std::array<uint8_t, 6> mac{};         // the port's MAC: the source of every answer
  uint32_t ipv4 = 0;                    // network order; 0: no ARP or ICMP answers
  std::array<uint8_t, 16> ipv6{};       // all zero: no ICMPv6 answers
  uint32_t max_replies_per_burst = 32;  // 1..256
  bool enabled() const;
};

struct L2Counters {
  uint64_t arp_replies = 0;         // ARP requests for our address answered
  uint64_t icmp_echo_replies = 0;   // ICMP echo requests to our address answered
  uint64_t icmp6_echo_replies = 0;  // ICMPv6 echo requests answered
  uint64_t nd_adverts = 0;          // neighbour solicitations for our address answered
  uint64_t not_for_us = 0;          // another address, another ARP/ICMP type, another protocol
  uint64_t malformed = 0;           // short, inconsistent lengths, bad checksum, fragments
  uint64_t over_budget = 0;         // not answered: max_replies_per_burst already queued
  uint64_t no_tx_frame = 0;         // not answered: txAlloc() had no frame (or one too small)
};

class L2Responder {
 public:
  enum class Result { kAnswered, kIgnored, kOverBudget, kNoTxFrame };
  static constexpr uint32_t kMaxRepliesPerBurst = 256;

  // Names the key at fault (a multicast MAC, max_replies_per_burst out of range).
  static absl::Status check(const L2Options& options);
  // `options` must have passed check().
  L2Responder(PacketDevice& device, const L2Options& options);

  bool enabled() const { return options_.enabled(); }
  // Looks at one received frame (len bytes from its Ethernet header); queues an answer when
  // it is one of ours. kIgnored: not ours or malformed (the caller drops it).
  Result handle(const uint8_t* frame, uint32_t len);
  // Transmits what handle() queued since the last flush (txBurst + txFlush); no-op if none.
  void flush();

  L2Counters counters() const;

 private:
  struct Counter {
    std::atomic<uint64_t> v{0};
    void inc() { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
    uint64_t get() const { return v.load(std::memory_order_relaxed); }
  };
  Result arp(const uint8_t* f, uint32_t len, uint32_t l2);
  Result icmp4(const uint8_t* f, uint32_t len, uint32_t l2);
  Result icmp6(const uint8_t* f, uint32_t len, uint32_t l2);
  // Starts an answer of `len` bytes to frame f: a transmit frame (kOverBudget / kNoTxFrame when
  // there is none) with the Ethernet header written: dst = `dst`, src = our MAC, f's VLAN tag,
  // `type`.
  Result begin(const uint8_t* f, uint32_t l2, uint32_t len, const uint8_t* dst, uint16_t type,
               Frame* out);
  // Queues a finished answer of `len` bytes for flush() and counts it.
  void queue(Frame& out, uint32_t len, Counter& counter);

  PacketDevice& device_;
  L2Options options_;
  bool v6_ = false;
  std::vector<Frame> queued_;  // capacity max_replies_per_burst
  Counter arp_replies_, icmp_echo_replies_, icmp6_echo_replies_, nd_adverts_, not_for_us_,
      malformed_, over_budget_, no_tx_frame_;
};

}  // namespace infergate::dataplane::ingress_filter
