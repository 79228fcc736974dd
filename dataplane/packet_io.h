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
  uint64_t meta = 0;        // rx: metadata the XDP program wrote (priority class...); else 0
};

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
};

}  // namespace infergate::dataplane
