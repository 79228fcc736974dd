#pragma once
// An AF_XDP socket (libxdp's xsk API) on one (interface, queue), as a PacketDevice for the
// userspace TCP stack: one UMEM and one socket per queue, nothing shared.
//
// UMEM layout: `rx_frames + hold_frames + tx_frames` chunks of `frame_size` bytes. The first
// rx_frames + hold_frames chunks only ever receive: they live in the fill ring, the rx ring, or
// with the caller between rxBurst() and rxRelease(); rxRelease() puts them straight back into
// the fill ring (kept full). hold_frames are the spares behind rxHoldBudget(): the caller (the
// TCP stack, for out-of-order segments) may keep up to that many frames past a burst, and the
// fill ring still holds rx_frames chunks minus those in flight (rx ring, current burst), so
// held frames never starve reception. rxOutstanding() counts the frames with the caller. The other
// tx_frames chunks only ever transmit: a free stack (txAlloc), the tx ring (txBurst), the
// completion ring (reaped in batches into the free stack). With every ring at least as large as the
// frames that can be in it, no ring operation can fail for lack of room, and nothing is allocated
// after open().
//
// Binding: zero-copy first (XDP_ZEROCOPY), copy mode when the driver refuses (veth, most
// virtual NICs); zeroCopy() says which. Every ring uses need_wakeup (XDP_USE_NEED_WAKEUP): the
// kernel is kicked (sendto / recvfrom) only when a ring's flag asks. In copy mode the kernel
// transmits at most a small batch per kick, so txFlush() kicks until the ring is drained or the
// kernel pushes back (then txPending() stays true and the reactor kicks again).
//
// The XDP program is not loaded by libxdp (XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD): infergate's
// own ingress program redirects to the socket through its XSKMAP, which open() fills when
// given its fd (key = queue).
//
// Tags: the `struct ig_tag` the XDP program wrote is read into Frame::meta (see
// encodeTag/decodeTag), from where XskOptions::tag_mode says the program loaded puts it
// (XdpFilter::tagMode(), enum ig_tag_mode):
//  - IG_TAG_META: the XDP metadata right in front of the frame (copied into the chunk's
//    headroom in copy mode); for a frame its driver gave no metadata room the program writes
//    the prefix below instead, which is stripped the same way (counted in tag_prefixed); a
//    frame with neither gets meta 0 (untagged: the stack judges it alone) and counts in
//    meta_missing;
//  - IG_TAG_PREFIX: the frame's first 16 bytes, stripped before the stack sees the frame. The
//    program prefixes every frame it redirects, so a frame without a valid prefix cannot be
//    parsed (where its Ethernet header starts is unknown): it is dropped (back to the fill
//    ring) and counted in meta_missing, never handed on.
//
// Threading: one reactor thread (PacketDevice rules); stats() may be read from another thread
// (plain counters, possibly one iteration stale).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/xsk/pollable_device.h"

namespace infergate::dataplane::xsk {

enum class ZeroCopy { kAuto, kRequire, kOff };

struct XskOptions {
  std::string interface;
  uint32_t queue = 0;
  uint32_t frame_size = 4096;   // UMEM chunk; power of two, 2048 or 4096
  uint32_t rx_frames = 4096;    // chunks for reception (all in the fill ring at start)
  uint32_t hold_frames = 1024;  // spare rx chunks the caller may hold (rxHoldBudget())
  uint32_t tx_frames = 4096;    // chunks for transmission
  ZeroCopy zero_copy = ZeroCopy::kAuto;
  uint8_t tag_mode = 0;         // enum ig_tag_mode: where struct ig_tag is (0: none read)
  int xskmap_fd = -1;           // >= 0: insert the socket into this XSKMAP at key `queue`
  bool busy_poll = false;       // SO_BUSY_POLL + SO_BUSY_POLL_BUDGET (+ SO_PREFER_BUSY_POLL)
  bool prefer_busy_poll = true; // with busy_poll: SO_PREFER_BUSY_POLL
  uint32_t busy_poll_usecs = 20;
  uint32_t busy_poll_budget = 64;
  uint32_t max_kicks_per_flush = 64;  // copy mode: sendto calls per txFlush at most
};

struct XskStats {
  uint64_t rx_frames = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_kicks = 0;          // sendto() calls (only when the tx ring asked)
  uint64_t tx_kick_busy = 0;      // sendto() answered EAGAIN/EBUSY/ENOBUFS: retried later
  uint64_t rx_wakeups = 0;        // recvfrom() calls because the fill ring asked
  uint64_t tx_alloc_failed = 0;   // txAlloc() with no free frame even after reaping
  uint64_t completions = 0;       // tx frames reaped from the completion ring
  uint64_t meta_missing = 0;      // a tag expected but none valid (metadata: untagged frame;
                                  // prefix: the frame dropped)
  uint64_t tag_prefixed = 0;      // metadata mode: frames tagged by a prefix (no metadata room)
  uint64_t rx_outstanding = 0;    // gauge: rx frames with the caller (burst + held)
  uint64_t rx_outstanding_max = 0;  // the most ever at once
  // From getsockopt(XDP_STATISTICS) (statsWithKernel()).
  uint64_t rx_dropped = 0, rx_invalid_descs = 0, tx_invalid_descs = 0;
  uint64_t rx_ring_full = 0, rx_fill_ring_empty = 0, tx_ring_empty = 0;
};

// Frame::meta packing of an ig_tag (bit 32 set when a valid tag was present).
struct TagMeta {
  uint8_t cls = 0xff;
  uint8_t verdict = 0;
  uint8_t flags = 0;
  uint8_t reason = 0;
};
inline uint64_t encodeTag(const TagMeta& t) {
  return (1ull << 32) | t.cls | (uint64_t{t.verdict} << 8) | (uint64_t{t.flags} << 16) |
         (uint64_t{t.reason} << 24);
}
inline std::optional<TagMeta> decodeTag(uint64_t meta) {
  if (!(meta & (1ull << 32))) return std::nullopt;
  return TagMeta{static_cast<uint8_t>(meta), static_cast<uint8_t>(meta >> 8),
                 static_cast<uint8_t>(meta >> 16), static_cast<uint8_t>(meta >> 24)};
}

class XskDevice final : public PollableDevice {
 public:
  // Creates the UMEM and the socket and binds it (zero-copy first unless told otherwise).
  // Errors name the interface, the queue and the fix (capability, queue id, MTU vs frame size).
  static absl::StatusOr<std::unique_ptr<XskDevice>> open(const XskOptions& options);
  ~XskDevice() override;
  XskDevice(const XskDevice&) = delete;
  XskDevice& operator=(const XskDevice&) = delete;

  // PacketDevice
  size_t rxBurst(Frame* frames, size_t max) override;
  void rxRelease(const Frame* frames, size_t n) override;
  uint32_t rxHoldBudget() const override { return options_.hold_frames; }
  bool txAlloc(Frame* frame) override;
  void txBurst(Frame* frames, size_t n) override;
  void txFlush() override;
  uint32_t mtu() const override { return mtu_; }

  // PollableDevice
  int fd() const override;
  void kick() override;
  bool txPending() const override;
  void busyPoll() override;

  bool zeroCopy() const { return zero_copy_; }
  uint32_t queue() const { return options_.queue; }
  const XskStats& stats() const { return stats_; }
  // stats() plus the kernel's XDP_STATISTICS (one getsockopt: for scrapes, not per packet;
  // callable from another thread).
  XskStats statsWithKernel() const;
  // Frames the tx pool holds right now (tests: every frame comes back).
  size_t txFreeFrames() const { return tx_free_.size(); }
  // Received frames not yet released (tests: every frame comes back).
  uint64_t rxOutstanding() const { return stats_.rx_outstanding; }
  // Chunks in the fill ring right now, as the kernel sees them (tests: held frames do not
  // starve it).
  uint32_t fillRingLevel() const;

 private:
  struct Rings;
  explicit XskDevice(const XskOptions& o);
  absl::Status create(bool zero_copy);
  void destroySocket();
  void reapCompletions();
  void kickTx();

  XskOptions options_;
  std::unique_ptr<Rings> rings_;
  uint8_t* area_ = nullptr;
  size_t area_size_ = 0;
  uint32_t mtu_ = 1500;
  bool zero_copy_ = false;
  std::vector<uint64_t> tx_free_;       // stack of free tx chunk addresses
  std::vector<uint64_t> fill_pending_;  // rx chunks the fill ring could not take (never, by sizing)
  XskStats stats_;
};

// The rx queue count of an interface (ETHTOOL_GCHANNELS, else /sys/class/net/<if>/queues).
absl::StatusOr<uint32_t> rxQueueCount(const std::string& interface);

}  // namespace infergate::dataplane::xsk
