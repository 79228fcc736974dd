#include "dataplane/xsk/xsk_device.h"

#include <errno.h>
#include <linux/ethtool.h>
#include <linux/if_xdp.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <cstring>
#include <filesystem>

#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "xdp/ingress_shared.h"
#include "dataplane/tcp/frame_tag.h"

// The stack reads Frame::meta with dataplane/tcp/frame_tag.h: same values as the program's.
static_assert(infergate::dataplane::tcp::kVerdictRateLimited == IG_TV_RATE_LIMITED);
static_assert(infergate::dataplane::tcp::kVerdictOverload == IG_TV_OVERLOAD);
static_assert(infergate::dataplane::tcp::kTagRequestStart == IG_TF_REQUEST_START);
static_assert(infergate::dataplane::tcp::kTagRejected == IG_TF_REJECTED);

#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif
#ifndef SO_BUSY_POLL
#define SO_BUSY_POLL 46
#endif

namespace infergate::dataplane::xsk {
namespace {

uint32_t pow2AtLeast(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

std::string errText(int e) {
  if (e < 0) e = -e;
  return fmt::format("{} ({})", std::strerror(e), e);
}

int interfaceIoctl(const std::string& ifname, unsigned long req, ifreq* ifr) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  std::memset(ifr, 0, sizeof(*ifr));
  std::strncpy(ifr->ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  const int rc = ioctl(fd, req, ifr);
  const int e = errno;
  close(fd);
  return rc == 0 ? 0 : -e;
}

uint64_t frameMeta(const ig_tag& t) {
  return encodeTag(TagMeta{t.cls, t.verdict, t.flags, t.reason});
}

// A valid tag prefix in the frame's first 16 bytes: taken into f.meta and stripped (true), or
// the frame left as it is (false).
bool takePrefixTag(Frame& f) {
  ig_tag t{};
  if (f.len < sizeof(ig_tag)) return false;
  std::memcpy(&t, f.data, sizeof t);
  if (t.magic != IG_TAG_MAGIC) return false;
  f.meta = frameMeta(t);
  f.data += sizeof(ig_tag);
  f.len -= static_cast<uint32_t>(sizeof(ig_tag));
  f.capacity = f.len;
  return true;
}

}  // namespace

struct XskDevice::Rings {
  xsk_ring_prod fill{};
  xsk_ring_cons comp{};
  xsk_ring_cons rx{};
  xsk_ring_prod tx{};
  xsk_umem* umem = nullptr;
  xsk_socket* socket = nullptr;
};

XskDevice::XskDevice(const XskOptions& o) : options_(o), rings_(std::make_unique<Rings>()) {}

absl::StatusOr<std::unique_ptr<XskDevice>> XskDevice::open(const XskOptions& o) {
  if (o.frame_size != 2048 && o.frame_size != 4096)
    return absl::InvalidArgumentError(
        fmt::format("xsk: frame_size {} (expected 2048 or 4096)", o.frame_size));
  if (o.rx_frames == 0 || o.tx_frames == 0)
    return absl::InvalidArgumentError("xsk: rx_frames and tx_frames must be positive");
  if (if_nametoindex(o.interface.c_str()) == 0)
    return absl::NotFoundError(fmt::format("xdp.interface: no interface named '{}'", o.interface));
  std::unique_ptr<XskDevice> d(new XskDevice(o));
  ifreq ifr;
  if (interfaceIoctl(o.interface, SIOCGIFMTU, &ifr) == 0) d->mtu_ = static_cast<uint32_t>(ifr.ifr_mtu);
  // A received frame sits after XDP_PACKET_HEADROOM (256) bytes of its chunk.
  if (d->mtu_ + 18 + XDP_PACKET_HEADROOM > o.frame_size)
    return absl::FailedPreconditionError(fmt::format(
        "interface {} has MTU {}: too large for AF_XDP frames of {} bytes (at most {}); lower the "
        "MTU (ip link set dev {} mtu 1500)",
        o.interface, d->mtu_, o.frame_size, o.frame_size - 18 - XDP_PACKET_HEADROOM, o.interface));
  d->area_size_ = static_cast<size_t>(o.rx_frames + o.hold_frames + o.tx_frames) * o.frame_size;
  void* area = mmap(nullptr, d->area_size_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (area == MAP_FAILED)
    return absl::ResourceExhaustedError(
        fmt::format("xsk: cannot map a UMEM of {} bytes: {}", d->area_size_, errText(errno)));
  d->area_ = static_cast<uint8_t*>(area);
  d->tx_free_.reserve(o.tx_frames);
  d->fill_pending_.reserve(o.rx_frames + o.hold_frames);

  absl::Status s;
  // A queue whose previous socket was just closed stays registered until the kernel's deferred
  // release runs (EBUSY for a few milliseconds, e.g. right after a restart): retry for ~1 s.
  auto create = [&d](bool zc) {
    absl::Status st;
    for (int attempt = 0; attempt < 50; ++attempt) {
      st = d->create(zc);
      if (st.ok() || st.code() != absl::StatusCode::kFailedPrecondition) return st;
      d->destroySocket();
      usleep(20'000);
    }
    return st;
  };
  if (o.zero_copy != ZeroCopy::kOff) {
    s = create(true);
    if (s.ok()) {
      d->zero_copy_ = true;
    } else if (o.zero_copy == ZeroCopy::kRequire) {
      return s;
    } else {
      spdlog::info("xsk: {} queue {}: zero-copy refused ({}); using copy mode", o.interface,
                   o.queue, std::string(s.message()));
      d->destroySocket();
    }
  }
  if (!d->zero_copy_) {
    s = create(false);
    if (!s.ok()) return s;
  }
  spdlog::info("xsk: {} queue {} bound in {} mode ({} rx + {} hold + {} tx frames of {} bytes, "
               "need_wakeup{})",
               o.interface, o.queue, d->zero_copy_ ? "zero-copy" : "copy", o.rx_frames,
               o.hold_frames, o.tx_frames,
               o.frame_size,
               !d->options_.busy_poll ? ""
               : o.prefer_busy_poll
                   ? fmt::format(", busy polling {} us, budget {}, preferred", o.busy_poll_usecs,
                                 o.busy_poll_budget)
                   : fmt::format(", busy polling {} us, budget {}", o.busy_poll_usecs,
                                 o.busy_poll_budget));
  return d;
}

absl::Status XskDevice::create(bool zero_copy) {
  const XskOptions& o = options_;
  Rings& r = *rings_;
  xsk_umem_config ucfg{};
  const uint32_t rx_chunks = o.rx_frames + o.hold_frames;
  ucfg.fill_size = pow2AtLeast(rx_chunks);
  ucfg.comp_size = pow2AtLeast(o.tx_frames);
  ucfg.frame_size = o.frame_size;
  ucfg.frame_headroom = 0;  // metadata lives in the kernel's XDP_PACKET_HEADROOM
  ucfg.flags = 0;
  int err = xsk_umem__create(&r.umem, area_, area_size_, &r.fill, &r.comp, &ucfg);
  if (err) {
    r.umem = nullptr;
    if (err == -EPERM || err == -EACCES)
      return absl::PermissionDeniedError(fmt::format(
          "xsk: registering the UMEM was refused ({}): run as root or grant CAP_NET_RAW, "
          "CAP_NET_ADMIN and CAP_IPC_LOCK (or raise RLIMIT_MEMLOCK)",
          errText(err)));
    return absl::InternalError(fmt::format("xsk: xsk_umem__create: {}", errText(err)));
  }
  xsk_socket_config scfg{};
  scfg.rx_size = pow2AtLeast(rx_chunks);
  scfg.tx_size = pow2AtLeast(o.tx_frames);
  scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  scfg.xdp_flags = 0;
  scfg.bind_flags = XDP_USE_NEED_WAKEUP | (zero_copy ? XDP_ZEROCOPY : XDP_COPY);
  err = xsk_socket__create(&r.socket, o.interface.c_str(), o.queue, r.umem, &r.rx, &r.tx, &scfg);
  if (err) {
    r.socket = nullptr;
    const std::string why = errText(err);
    if (err == -EINVAL && !zero_copy)
      return absl::InvalidArgumentError(fmt::format(
          "xsk: cannot bind to {} queue {}: {} (is the queue id below the interface's rx queue "
          "count? see ethtool -l {})",
          o.interface, o.queue, why, o.interface));
    if (err == -EPERM || err == -EACCES)
      return absl::PermissionDeniedError(fmt::format(
          "xsk: creating the AF_XDP socket on {} was refused ({}): needs CAP_NET_RAW and "
          "CAP_NET_ADMIN",
          o.interface, why));
    if (err == -EBUSY)
      return absl::FailedPreconditionError(fmt::format(
          "xsk: {} queue {} is busy ({}): another AF_XDP socket is bound to it", o.interface,
          o.queue, why));
    return absl::InternalError(fmt::format("xsk: binding to {} queue {} in {} mode: {}",
                                           o.interface, o.queue, zero_copy ? "zero-copy" : "copy", why));
  }
  // Fill ring: every rx chunk (the spares for held frames included), kept full from now on.
  uint32_t idx = 0;
  if (xsk_ring_prod__reserve(&r.fill, rx_chunks, &idx) != rx_chunks)
    return absl::InternalError("xsk: the fill ring cannot take the rx frames");
  for (uint32_t i = 0; i < rx_chunks; ++i)
    *xsk_ring_prod__fill_addr(&r.fill, idx + i) = static_cast<uint64_t>(i) * o.frame_size;
  xsk_ring_prod__submit(&r.fill, rx_chunks);
  stats_.rx_outstanding = 0;
  tx_free_.clear();
  for (uint32_t i = o.tx_frames; i-- > 0;)
    tx_free_.push_back(static_cast<uint64_t>(rx_chunks + i) * o.frame_size);
  if (o.xskmap_fd >= 0) {
    err = xsk_socket__update_xskmap(r.socket, o.xskmap_fd);
    if (err)
      return absl::InternalError(fmt::format("xsk: inserting the socket of {} queue {} into the "
                                             "XSKMAP: {}",
                                             o.interface, o.queue, errText(err)));
  }
  if (o.busy_poll) {
    const int fd = xsk_socket__fd(r.socket);
    int one = 1;
    int usecs = static_cast<int>(o.busy_poll_usecs);
    int budget = static_cast<int>(o.busy_poll_budget);
    if ((o.prefer_busy_poll &&
         setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof one) != 0) ||
        setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usecs, sizeof usecs) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof budget) != 0) {
      spdlog::warn("xsk: {} queue {}: busy polling not enabled: {} (needs CAP_NET_ADMIN for "
                   "SO_BUSY_POLL_BUDGET; kernel >= 5.11)",
                   o.interface, o.queue, errText(errno));
      options_.busy_poll = false;
    }
  }
  return absl::OkStatus();
}

void XskDevice::destroySocket() {
  if (rings_->socket) xsk_socket__delete(rings_->socket);
  rings_->socket = nullptr;
  if (rings_->umem) xsk_umem__delete(rings_->umem);
  rings_->umem = nullptr;
  *rings_ = Rings{};
}

XskDevice::~XskDevice() {
  destroySocket();
  if (area_) munmap(area_, area_size_);
}

uint32_t XskDevice::fillRingLevel() const {
  const xsk_ring_prod& f = rings_->fill;
  const uint32_t cons = __atomic_load_n(f.consumer, __ATOMIC_ACQUIRE);
  return *f.producer - cons;
}

int XskDevice::fd() const { return rings_->socket ? xsk_socket__fd(rings_->socket) : -1; }

size_t XskDevice::rxBurst(Frame* frames, size_t max) {
  Rings& r = *rings_;
  if (!fill_pending_.empty()) rxRelease(nullptr, 0);  // retries the pending chunks
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_cons__peek(&r.rx, static_cast<uint32_t>(max), &idx);
  if (n == 0) {
    if (xsk_ring_prod__needs_wakeup(&r.fill)) {
      ++stats_.rx_wakeups;
      recvfrom(xsk_socket__fd(r.socket), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    }
    return 0;
  }
  const uint64_t chunk_mask = ~static_cast<uint64_t>(options_.frame_size - 1);
  uint32_t k = 0;  // frames handed on (a prefix-mode frame without its tag is not)
  for (uint32_t i = 0; i < n; ++i) {
    const xdp_desc* d = xsk_ring_cons__rx_desc(&r.rx, idx + i);
    const uint64_t addr = xsk_umem__add_offset_to_addr(d->addr);
    Frame& f = frames[k];
    f.data = area_ + addr;
    f.len = d->len;
    f.capacity = d->len;
    f.handle = addr;
    f.meta = 0;
    if (options_.tag_mode == IG_TAG_META) {
      // The tag sits right in front of the frame, inside the chunk's headroom.
      const uint64_t chunk = addr & chunk_mask;
      ig_tag t{};
      if (addr - chunk >= sizeof(ig_tag)) std::memcpy(&t, f.data - sizeof(ig_tag), sizeof t);
      if (t.magic == IG_TAG_MAGIC) {
        f.meta = frameMeta(t);
        // Consumed: a later frame in this chunk must not see a stale tag.
        std::memset(f.data - sizeof(ig_tag), 0, sizeof(ig_tag));
      } else if (f.len >= sizeof(ig_tag) + 14 && takePrefixTag(f)) {
        // No metadata room on this frame (a driver without it): the program put the tag in a
        // prefix instead. Its magic sits where a frame's ethertype is, and 0x314d is none the
        // program redirects, so the two cannot be confused.
        ++stats_.tag_prefixed;
      } else {
        ++stats_.meta_missing;  // untagged: the stack judges it alone
      }
    } else if (options_.tag_mode == IG_TAG_PREFIX && !takePrefixTag(f)) {
      ++stats_.meta_missing;
      fill_pending_.push_back(addr & chunk_mask);  // back to the fill ring (next rxBurst)
      continue;
    }
    ++k;
  }
  xsk_ring_cons__release(&r.rx, n);
  if (k != n) rxRelease(nullptr, 0);  // the dropped frames' chunks back into the fill ring
  stats_.rx_frames += k;
  stats_.rx_outstanding += k;
  if (stats_.rx_outstanding > stats_.rx_outstanding_max) stats_.rx_outstanding_max = stats_.rx_outstanding;
  return k;
}

void XskDevice::rxRelease(const Frame* frames, size_t n) {
  Rings& r = *rings_;
  const uint64_t mask = ~static_cast<uint64_t>(options_.frame_size - 1);
  stats_.rx_outstanding -= n;
  const size_t total = n + fill_pending_.size();
  if (total == 0) return;
  uint32_t idx = 0;
  const uint32_t got = xsk_ring_prod__reserve(&r.fill, static_cast<uint32_t>(total), &idx);
  if (got == 0) {
    // Cannot happen with fill ring >= rx frames; keep the chunks rather than lose them.
    for (size_t i = 0; i < n; ++i) fill_pending_.push_back(frames[i].handle & mask);
    return;
  }
  uint32_t k = 0;
  for (uint64_t a : fill_pending_) *xsk_ring_prod__fill_addr(&r.fill, idx + k++) = a;
  fill_pending_.clear();
  for (size_t i = 0; i < n; ++i) *xsk_ring_prod__fill_addr(&r.fill, idx + k++) = frames[i].handle & mask;
  xsk_ring_prod__submit(&r.fill, got);
}

void XskDevice::reapCompletions() {
  Rings& r = *rings_;
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_cons__peek(&r.comp, options_.tx_frames, &idx);
  if (n == 0) return;
  for (uint32_t i = 0; i < n; ++i) tx_free_.push_back(*xsk_ring_cons__comp_addr(&r.comp, idx + i));
  xsk_ring_cons__release(&r.comp, n);
  stats_.completions += n;
}

bool XskDevice::txAlloc(Frame* frame) {
  if (tx_free_.empty()) {
    reapCompletions();
    if (tx_free_.empty()) {
      // Copy mode: frames still queued in the tx ring come back only after a kick.
      kickTx();
      reapCompletions();
      if (tx_free_.empty()) {
        ++stats_.tx_alloc_failed;
        return false;
      }
    }
  }
  const uint64_t addr = tx_free_.back();
  tx_free_.pop_back();
  frame->data = area_ + addr;
  frame->len = 0;
  frame->capacity = options_.frame_size;
  frame->handle = addr;
  frame->meta = 0;
  return true;
}

void XskDevice::txBurst(Frame* frames, size_t n) {
  if (n == 0) return;
  Rings& r = *rings_;
  uint32_t idx = 0;
  // Never fails: the tx ring is at least as large as the tx pool and these frames are not in it.
  if (xsk_ring_prod__reserve(&r.tx, static_cast<uint32_t>(n), &idx) != n) {
    for (size_t i = 0; i < n; ++i) tx_free_.push_back(frames[i].handle);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    xdp_desc* d = xsk_ring_prod__tx_desc(&r.tx, idx + static_cast<uint32_t>(i));
    d->addr = frames[i].handle;
    d->len = frames[i].len;
    d->options = 0;
  }
  xsk_ring_prod__submit(&r.tx, static_cast<uint32_t>(n));
  stats_.tx_frames += n;
}

bool XskDevice::txPending() const {
  const Rings& r = *rings_;
  const uint32_t cons = __atomic_load_n(r.tx.consumer, __ATOMIC_ACQUIRE);
  return cons != *r.tx.producer && xsk_ring_prod__needs_wakeup(&r.tx);
}

void XskDevice::kickTx() {
  Rings& r = *rings_;
  const int fd = xsk_socket__fd(r.socket);
  for (uint32_t i = 0; i < options_.max_kicks_per_flush; ++i) {
    if (!xsk_ring_prod__needs_wakeup(&r.tx)) return;
    const uint32_t cons = __atomic_load_n(r.tx.consumer, __ATOMIC_ACQUIRE);
    if (cons == *r.tx.producer) return;  // everything handed over
    ++stats_.tx_kicks;
    const ssize_t rc = sendto(fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0);
    if (rc < 0) {
      // EAGAIN: copy mode sent its batch and wants another call; the rest: pushed back.
      if (errno == EAGAIN || errno == EINTR) continue;
      ++stats_.tx_kick_busy;
      return;
    }
    if (zero_copy_) return;  // the driver transmits asynchronously
  }
}

void XskDevice::txFlush() {
  kickTx();
  reapCompletions();
}

void XskDevice::kick() {
  Rings& r = *rings_;
  if (xsk_ring_prod__needs_wakeup(&r.fill)) {
    ++stats_.rx_wakeups;
    recvfrom(xsk_socket__fd(r.socket), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  }
  kickTx();
  reapCompletions();
}

void XskDevice::busyPoll() {
  recvfrom(xsk_socket__fd(rings_->socket), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
}

XskStats XskDevice::statsWithKernel() const {
  XskStats out = stats_;
  xdp_statistics st{};
  socklen_t len = sizeof st;
  if (getsockopt(fd(), SOL_XDP, XDP_STATISTICS, &st, &len) != 0) return out;
  out.rx_dropped = st.rx_dropped;
  out.rx_invalid_descs = st.rx_invalid_descs;
  out.tx_invalid_descs = st.tx_invalid_descs;
  if (len >= sizeof st) {
    out.rx_ring_full = st.rx_ring_full;
    out.rx_fill_ring_empty = st.rx_fill_ring_empty_descs;
    out.tx_ring_empty = st.tx_ring_empty_descs;
  }
  return out;
}

absl::StatusOr<uint32_t> rxQueueCount(const std::string& interface) {
  ethtool_channels ch{};
  ch.cmd = ETHTOOL_GCHANNELS;
  ifreq ifr;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    std::memset(&ifr, 0, sizeof ifr);
    std::strncpy(ifr.ifr_name, interface.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&ch);
    const int rc = ioctl(fd, SIOCETHTOOL, &ifr);
    close(fd);
    if (rc == 0) {
      const uint32_t n = ch.combined_count + ch.rx_count;
      if (n > 0) return n;
    }
  }
  std::error_code ec;
  uint32_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net/" + interface + "/queues", ec)) {
    if (e.path().filename().string().rfind("rx-", 0) == 0) ++n;
  }
  if (ec || n == 0)
    return absl::NotFoundError(fmt::format("cannot read the rx queue count of {} (ethtool -l {})",
                                           interface, interface));
  return n;
}

}  // namespace infergate::dataplane::xsk
