#pragma once
// The packet I/O seam of the data plane: a device that receives and transmits whole Ethernet
// frames in bursts. AF_XDP (a UMEM + XSK rings), DPDK (mbufs on a port queue) and the fake
// device of the unit tests implement it; the userspace TCP/IP stack (dataplane/tcp/) is its
// only user.
//
// Ownership: frames returned by rxBurst() belong to the device's memory (UMEM, mbuf pool) and
// stay valid until the caller hands them back with rxRelease(). The caller may hand them back
// in any order, any subset at a time, and keep some past the burst: up to rxHoldBudget()
// frames at once may be held that way without starving reception (the device keeps that many
// spare frames, so its fill ring stays supplied while they are held; the TCP stack holds
// out-of-order segments in their frames this way instead of copying them). Every frame is
// released exactly once; the caller never keeps a pointer into a frame after releasing it. A
// frame obtained with txAlloc() belongs to the caller
// until it is passed to txBurst(), which hands it to the device for good (the device frees it
// when the NIC completes it). txFlush() tells the device that a batch is complete; a device
// with need_wakeup kicks the kernel only when its ring asks.
//
// Threading: one device per reactor thread; no method is thread-safe. No method allocates or
// makes a system call per frame (txFlush may make one per batch, when the ring asks).

#include <cstddef>
#include <cstdint>

namespace infergate::dataplane {

struct Frame {
  uint8_t* data = nullptr;  // first byte of the Ethernet header
  uint32_t len = 0;         // bytes of frame (rx: received; tx: filled by the caller)
  uint32_t capacity = 0;    // bytes writable at data (tx)
  uint64_t handle = 0;      // the device's own reference (UMEM address, mbuf pointer...)
  uint64_t meta = 0;        // rx: the XDP program's tag (dataplane/tcp/frame_tag.h) and the
                            // kMetaRx* checksum bits; tx: kMetaTxChecksumOffload or 0
};

// Checksum offload between a device and the stack (dpdk mode only: AF_XDP, the fake device and
// the socket path have none, and the stack computes and verifies every checksum there). The
// bits live in Frame::meta beside the XDP tag (bits 0-32).
//
// rx: a device sets these only for a checksum its NIC reported GOOD for that very frame (DPDK's
// RTE_MBUF_F_RX_*_CKSUM_GOOD); the stack then skips its own verification of that checksum and
// verifies every other one in software. No tag, verdict or guess ever sets them; a NIC's BAD is
// the device's counted drop, and anything else (unknown, none) leaves the bit clear.
inline constexpr uint64_t kMetaRxIpChecksumGood = 1ull << 40;  // the IPv4 header checksum
inline constexpr uint64_t kMetaRxL4ChecksumGood = 1ull << 41;  // the TCP checksum
inline constexpr uint64_t kMetaRxChecksumMask = kMetaRxIpChecksumGood | kMetaRxL4ChecksumGood;
// tx: the stack marks a frame whose checksums the NIC completes (only when the device's
// txChecksumOffload() is true): Ethernet (14 bytes, no VLAN tag) + IPv4 (20 bytes, no options;
// header checksum 0) or IPv6 (40 bytes) + TCP whose checksum field holds the pseudo-header sum
// (folded, not complemented: what DPDK's rte_ipv4_phdr_cksum / rte_ipv6_phdr_cksum give).
inline constexpr uint64_t kMetaTxChecksumOffload = 1ull << 48;

class PacketDevice {
 public:
  virtual ~PacketDevice() = default;
  // Up to `max` received frames into `frames`; returns how many.
  virtual size_t rxBurst(Frame* frames, size_t max) = 0;
  // Gives received frames back to the device (refills its fill ring); any subset of the
  // frames received so far, each exactly once.
  virtual void rxRelease(const Frame* frames, size_t n) = 0;
  // How many received frames the caller may keep past rxBurst() at once (spare frames the
  // device has beyond what it keeps in reception); 0: release every frame after its burst.
  virtual uint32_t rxHoldBudget() const { return 0; }
  // A free transmit buffer of at least mtu()+14 bytes; false when none is free right now
  // (completion ring not yet reaped, pool exhausted): the caller retries later.
  virtual bool txAlloc(Frame* frame) = 0;
  // Queues filled frames for transmission; ownership passes to the device.
  virtual void txBurst(Frame* frames, size_t n) = 0;
  // End of a batch: kick the NIC when the ring needs a wakeup.
  virtual void txFlush() = 0;
  // IP MTU of the link (1500 on ordinary Ethernet).
  virtual uint32_t mtu() const = 0;
  // true: the NIC completes the IPv4 header and TCP checksums of frames that txBurst() gets
  // with kMetaTxChecksumOffload (see above), so the stack leaves them. Read once, when the
  // stack is built. Default false: the stack computes every checksum.
  virtual bool txChecksumOffload() const { return false; }
};

}  // namespace infergate::dataplane
