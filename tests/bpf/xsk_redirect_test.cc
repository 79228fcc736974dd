// afxdp: the ingress program's redirect verdict and the AF_XDP device, on a veth pair in a
// private network namespace (unshare at start-up). Needs root; skips with a message otherwise.
//  - every fixture through BPF_PROG_TEST_RUN with redirect_xsk on: service passes become
//    XDP_REDIRECT when queue 0 has a socket in the XSKMAP and stay XDP_PASS without one;
//    rejected request starts (XDP_TX + RST without a socket) become XDP_REDIRECT of the
//    original frame tagged IG_TF_REJECTED (userspace's stack sends the RST); every other
//    verdict (drops, non-service passes: ARP, ICMP, other ports) is unchanged;
//  - real frames: sent from the peer with an AF_PACKET socket, received by XskDevice (copy
//    mode on veth) with the program's tag in Frame::meta; ARP is not redirected; frames sent
//    through XskDevice arrive on the peer byte-exact; every tx frame comes back.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/bpf/netns_env.h"
#include "dataplane/xsk/xsk_device.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/load_or_skip.h"
#include "xdp/testing/prog_run.h"
#include "xdp/xdp_filter.h"

namespace infergate::xdp::testing {
namespace {

using dataplane::Frame;
using dataplane::xsk::XskDevice;
using dataplane::xsk::XskOptions;

using Placement = XdpOptions::TagPlacement;

XdpOptions redirectOptions(Placement tags = Placement::kAuto) {
  XdpOptions o = fixtureOptions();
  o.interface = "igx0";
  o.redirect_xsk = true;
  o.tags = tags;
  o.track_flows = false;  // every fixture judged alone (no flow state carried between them)
  return o;
}

XskOptions deviceOptions(int xskmap_fd, int tag_mode) {
  XskOptions so;
  so.interface = "igx0";
  so.queue = 0;
  so.rx_frames = 64;
  so.hold_frames = 32;
  so.tx_frames = 64;
  so.tag_mode = static_cast<uint8_t>(tag_mode);  // as the program was loaded
  so.xskmap_fd = xskmap_fd;
  return so;
}

// `f`: the filter loaded with `opts`; `dev`: an AF_XDP socket bound on igx0 queue 0 through its
// map, so the program's redirects have somewhere to go. Fails the test when either is refused.
// A test of the metadata placement skips where the kernel cannot write metadata.
#define LOAD_WITH_SOCKET(f, dev, opts)                                           \
  auto f = XdpFilter::load(opts);                                                \
  if (!f.ok() && metadataRefused(f.status())) GTEST_SKIP() << f.status().message(); \
  ASSERT_TRUE(f.ok()) << f.status();                                             \
  auto dev = XskDevice::open(deviceOptions((*f)->xskMapFd(), (*f)->tagMode()));  \
  ASSERT_TRUE(dev.ok()) << dev.status()

int expectedWithSocket(const Fixture& f) {
  const bool service_pass = f.action == XDP_PASS &&
                            (f.reason == IG_R_SEGMENT || f.reason == IG_R_SYN || f.reason == IG_R_REQUEST);
  // A rejected request start goes to the socket (flagged IG_TF_REJECTED) instead of a RST.
  return service_pass || f.action == XDP_TX ? XDP_REDIRECT : f.action;
}

// The tag of a redirected frame, wherever the loaded program put it, and the frame the stack
// gets: metadata in front (r.meta, the frame untouched) or the first 16 bytes (stripped).
struct Tagged {
  bool present = false;  // exactly one tag where the placement puts it
  ig_tag tag{};
  std::vector<uint8_t> frame;
};
Tagged tagged(const XdpFilter& f, const RunResult& r) {
  Tagged t;
  if (f.tagMode() == IG_TAG_META) {
    t.present = r.meta.size() == sizeof(ig_tag);
    if (t.present) std::memcpy(&t.tag, r.meta.data(), sizeof t.tag);
    t.frame = r.out;
  } else if (f.tagMode() == IG_TAG_PREFIX) {
    t.present = r.meta.empty() && r.out.size() >= sizeof(ig_tag);
    if (t.present) {
      std::memcpy(&t.tag, r.out.data(), sizeof t.tag);
      t.frame.assign(r.out.begin() + sizeof(ig_tag), r.out.end());
    }
  }
  return t;
}

class XskTags : public ::testing::TestWithParam<Placement> {};
std::string placementName(const ::testing::TestParamInfo<Placement>& p) {
  return std::string(tagPlacementName(p.param));
}

TEST_P(XskTags, FixturesRedirectServicePassesOnlyWhenASocketIsBound) {
  SKIP_WITHOUT_NETNS();
  auto f = XdpFilter::load(redirectOptions(GetParam()));
  if (!f.ok() && metadataRefused(f.status())) GTEST_SKIP() << f.status().message();
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tagMode(), GetParam() == Placement::kMetadata ? IG_TAG_META : IG_TAG_PREFIX);
  // Empty XSKMAP: bpf_redirect_map falls back to XDP_PASS; the table holds unchanged.
  int checked = 0;
  for (const Fixture& fx : fixtures()) {
    if (fx.packet.size() < 14 || fx.first_segment) continue;  // the kernel refuses < 14 bytes
    RunResult r = runXdp((*f)->programFd(), fx.packet);
    ASSERT_EQ(r.err, 0) << fx.name;
    EXPECT_EQ(static_cast<int>(r.retval), fx.action) << fx.name << " (no socket bound)";
    if (fx.action == XDP_PASS && (*f)->tagMode() == IG_TAG_PREFIX) {
      EXPECT_EQ(r.out, fx.packet) << fx.name << ": no prefix on a frame the kernel gets";
    }
    ++checked;
  }
  EXPECT_GT(checked, 100);
  // A socket on queue 0: service passes are redirected, the rest keeps its verdict.
  auto dev = XskDevice::open(deviceOptions((*f)->xskMapFd(), (*f)->tagMode()));
  ASSERT_TRUE(dev.ok()) << dev.status();
  int redirected = 0, rejected = 0;
  for (const Fixture& fx : fixtures()) {
    if (fx.packet.size() < 14 || fx.first_segment) continue;
    RunResult r = runXdp((*f)->programFd(), fx.packet);
    ASSERT_EQ(r.err, 0) << fx.name;
    EXPECT_EQ(static_cast<int>(r.retval), expectedWithSocket(fx)) << fx.name;
    if (r.retval == XDP_REDIRECT) {
      ++redirected;
      // The tag rides where the placement puts it (what XskDevice reads).
      const Tagged tg = tagged(**f, r);
      ASSERT_TRUE(tg.present) << fx.name;
      const ig_tag& t = tg.tag;
      EXPECT_EQ(t.magic, IG_TAG_MAGIC) << fx.name;
      EXPECT_EQ(tg.frame, fx.packet) << fx.name << ": the frame itself is unchanged";
      EXPECT_EQ(t.reason, fx.reason) << fx.name;
      const bool want_rejected = fx.action == XDP_TX;
      EXPECT_EQ((t.flags & IG_TF_REJECTED) != 0, want_rejected) << fx.name;
      if (want_rejected) {
        ++rejected;
        // The original frame, not a RST built over it.
        EXPECT_EQ(tg.frame, fx.packet) << fx.name;
      }
    }
  }
  EXPECT_GT(redirected, 20);
  EXPECT_GT(rejected, 5);
  // Taken out again: back to XDP_PASS (and the program's own RST for rejected starts).
  ASSERT_TRUE((*f)->removeXsk(0).ok());
  for (const Fixture& fx : fixtures()) {
    if (fx.packet.size() < 14 || fx.first_segment) continue;
    if (expectedWithSocket(fx) != XDP_REDIRECT) continue;
    RunResult r = runXdp((*f)->programFd(), fx.packet);
    EXPECT_EQ(static_cast<int>(r.retval), fx.action == XDP_TX ? XDP_TX : XDP_PASS) << fx.name;
    if (fx.action == XDP_TX && !fx.expected_out.empty()) {
      EXPECT_EQ(r.out, fx.expected_out) << fx.name << " (the RST)";
    }
  }
}

TEST(XskRedirect, RedirectOffByDefault) {
  SKIP_WITHOUT_NETNS();
  XdpOptions o = redirectOptions();
  o.redirect_xsk = false;
  LOAD_WITH_SOCKET(f, dev, o);
  for (const Fixture& fx : fixtures()) {
    if (fx.packet.size() < 14 || fx.first_segment) continue;
    EXPECT_EQ(static_cast<int>(runXdp((*f)->programFd(), fx.packet).retval), fx.action) << fx.name;
  }
}

TEST_P(XskTags, MidStreamLookalikesAreContinuationsWhenAsked) {
  SKIP_WITHOUT_NETNS();
  // Body bytes of a keep-alive upload that happen to begin like a request line.
  PacketSpec mid;
  mid.payload = std::string("BREW \x01\x9f\x33 binary body bytes", 26);
  PacketSpec path = mid;
  path.sport = 40002;  // another connection: a reset flow drops its later data
  path.payload = "GET /etc/passwd HTTP/1.1\r\n";
  for (bool reject : {true, false}) {
    XdpOptions o = redirectOptions(GetParam());
    o.track_flows = true;
    o.reject_mid_stream = reject;
    LOAD_WITH_SOCKET(f, dev, o);
    // Both ways the frame goes to the socket; rejected, it carries IG_TF_REJECTED (the
    // stack resets the connection) instead of being answered with a RST here.
    for (const PacketSpec& spec : {mid, path}) {
      RunResult r = runXdp((*f)->programFd(), buildPacket(spec));
      EXPECT_EQ(static_cast<int>(r.retval), XDP_REDIRECT) << reject;
      EXPECT_EQ((tagged(**f, r).tag.flags & IG_TF_REJECTED) != 0, reject) << reject;
    }
    // The connection's known first data segment is always judged: SYN (seq 4999), then data
    // at 5000 that is not a request line -> RST.
    PacketSpec syn = mid;
    syn.sport = 41000;
    syn.seq = 4999;
    syn.flags = 0x02;
    syn.payload.clear();
    PacketSpec first = mid;
    first.sport = 41000;
    first.seq = 5000;
    EXPECT_EQ(static_cast<int>(runXdp((*f)->programFd(), buildPacket(syn)).retval), XDP_REDIRECT);
    RunResult r = runXdp((*f)->programFd(), buildPacket(first));
    EXPECT_EQ(static_cast<int>(r.retval), XDP_REDIRECT) << reject;
    EXPECT_NE(tagged(**f, r).tag.flags & IG_TF_REJECTED, 0) << reject;
    const XdpCounters c = (*f)->readCounters();
    EXPECT_EQ(c.packets[XDP_REDIRECT][IG_R_SEGMENT], reject ? 0u : 2u);
    EXPECT_EQ(c.packets[XDP_REDIRECT][IG_R_BAD_METHOD], reject ? 2u : 1u);
    EXPECT_EQ(c.packets[XDP_REDIRECT][IG_R_BAD_PATH], reject ? 1u : 0u);
    EXPECT_EQ(c.packets[XDP_TX][IG_R_BAD_METHOD] + c.packets[XDP_TX][IG_R_BAD_PATH], 0u);
  }
}

TEST_P(XskTags, RejectedRequestStartGoesToTheSocketFlaggedElseARst) {
  SKIP_WITHOUT_NETNS();
  XdpOptions o = redirectOptions(GetParam());
  o.track_flows = true;
  LOAD_WITH_SOCKET(f, dev, o);
  const int prog = (*f)->programFd();
  // A new connection whose first data segment is not a request start.
  PacketSpec syn;
  syn.sport = 42000;
  syn.seq = 6999;
  syn.flags = 0x02;
  PacketSpec bad = syn;
  bad.seq = 7000;
  bad.flags = 0x18;  // PSH|ACK
  bad.payload = "GARBAGE\r\n\r\n";
  PacketSpec later = bad;
  later.seq = 7000 + static_cast<uint32_t>(bad.payload.size());
  later.payload = "GET /v2/health/ready HTTP/1.1\r\n\r\n";
  ASSERT_EQ(static_cast<int>(runXdp(prog, buildPacket(syn)).retval), XDP_REDIRECT);
  const std::vector<uint8_t> frame = buildPacket(bad);
  RunResult r = runXdp(prog, frame);
  ASSERT_EQ(r.err, 0);
  EXPECT_EQ(static_cast<int>(r.retval), XDP_REDIRECT);
  const Tagged tg = tagged(**f, r);
  ASSERT_TRUE(tg.present);
  EXPECT_EQ(tg.frame, frame) << "the original frame, for the stack to answer";
  const ig_tag t = tg.tag;
  EXPECT_EQ(t.magic, IG_TAG_MAGIC);
  EXPECT_NE(t.flags & IG_TF_REJECTED, 0);
  EXPECT_EQ(t.reason, IG_R_BAD_REQUEST_LINE);
  // The flow is marked rejected: its later data is dropped here.
  RunResult l = runXdp(prog, buildPacket(later));
  EXPECT_EQ(static_cast<int>(l.retval), XDP_DROP);
  XdpCounters c = (*f)->readCounters();
  EXPECT_EQ(c.packets[XDP_REDIRECT][IG_R_BAD_REQUEST_LINE], 1u);
  EXPECT_EQ(c.packets[XDP_TX][IG_R_BAD_REQUEST_LINE], 0u);
  EXPECT_EQ(c.packets[XDP_DROP][IG_R_REJECTED_FLOW], 1u);

  // No socket on the queue: the program answers with the RST itself, as before.
  ASSERT_TRUE((*f)->removeXsk(0).ok());
  PacketSpec syn2 = syn, bad2 = bad;
  syn2.sport = bad2.sport = 42001;
  EXPECT_EQ(static_cast<int>(runXdp(prog, buildPacket(syn2)).retval), XDP_PASS);
  RunResult r2 = runXdp(prog, buildPacket(bad2));
  EXPECT_EQ(static_cast<int>(r2.retval), XDP_TX);
  ASSERT_GE(r2.out.size(), 14u + 20u + 20u);
  EXPECT_LT(r2.out.size(), buildPacket(bad2).size()) << "the payload is cut off";
  EXPECT_NE(r2.out[14 + 20 + 13] & 0x04, 0) << "RST flag";
  c = (*f)->readCounters();
  EXPECT_EQ(c.packets[XDP_TX][IG_R_BAD_REQUEST_LINE], 1u);
  EXPECT_EQ(c.packets[XDP_REDIRECT][IG_R_BAD_REQUEST_LINE], 1u);
}

int packetSocket(const char* ifname) {
  int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (s < 0) return -1;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname));
  if (bind(s, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// Polls the device until `want` frames arrived or 2 s passed.
std::vector<std::vector<uint8_t>> receive(XskDevice& dev, size_t want, std::vector<uint64_t>* metas) {
  std::vector<std::vector<uint8_t>> got;
  Frame frames[16];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    const size_t n = dev.rxBurst(frames, 16);
    for (size_t i = 0; i < n; ++i) {
      got.emplace_back(frames[i].data, frames[i].data + frames[i].len);
      if (metas) metas->push_back(frames[i].meta);
    }
    dev.rxRelease(frames, n);
    if (n == 0) {
      pollfd p{dev.fd(), POLLIN, 0};
      poll(&p, 1, 10);
    }
  }
  return got;
}

// The redirect program, attached once a socket (deviceOptions) is bound through its XSKMAP;
// the device reads tags where the program puts them, or where `device_tags` says (a mismatch
// staged on purpose), when given.
absl::StatusOr<std::unique_ptr<XdpFilter>> attachWithDevice(std::unique_ptr<XskDevice>* dev,
                                                            Placement tags = Placement::kAuto,
                                                            int device_tags = -1) {
  return XdpFilter::attach(redirectOptions(tags), [dev, device_tags](XdpFilter& filter) {
    const int mode = device_tags >= 0 ? device_tags : filter.tagMode();
    auto d = XskDevice::open(deviceOptions(filter.xskMapFd(), mode));
    if (!d.ok()) return d.status();
    *dev = std::move(*d);
    return absl::OkStatus();
  });
}

TEST_P(XskTags, ReceivesRedirectedFramesWithTagsAndTransmits) {
  SKIP_WITHOUT_NETNS();
  std::unique_ptr<XskDevice> dev;
  auto f = attachWithDevice(&dev, GetParam());
  if (!f.ok() && metadataRefused(f.status())) GTEST_SKIP() << f.status().message();
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(dev);
  EXPECT_FALSE(dev->zeroCopy()) << "veth has copy mode only";
  const int peer = packetSocket("igx1");
  ASSERT_GE(peer, 0) << strerror(errno);

  // A request start and a SYN to the service port: redirected, tagged.
  PacketSpec req;
  req.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  req.payload = "POST /v2/models/urgent/infer HTTP/1.1\r\nHost: x\r\n\r\n";
  PacketSpec syn = req;
  syn.payload.clear();
  syn.flags = 0x02;
  syn.sport = 40001;
  const std::vector<uint8_t> a = buildPacket(req), b = buildPacket(syn);
  ASSERT_EQ(send(peer, a.data(), a.size(), 0), static_cast<ssize_t>(a.size()));
  ASSERT_EQ(send(peer, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
  std::vector<uint64_t> metas;
  auto got = receive(*dev, 2, &metas);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], a);
  EXPECT_EQ(got[1], b);
  auto t0 = dataplane::xsk::decodeTag(metas[0]);
  ASSERT_TRUE(t0.has_value());
  EXPECT_EQ(t0->cls, 0) << "/v2/models/urgent -> class 0";
  EXPECT_EQ(t0->reason, IG_R_REQUEST);
  auto t1 = dataplane::xsk::decodeTag(metas[1]);
  ASSERT_TRUE(t1.has_value());
  EXPECT_EQ(t1->reason, IG_R_SYN);

  // ARP and another port reach the kernel, not the socket.
  std::vector<uint8_t> arp(42, 0);
  std::memset(arp.data(), 0xff, 6);
  arp[6] = 0x02;
  arp[12] = 0x08;
  arp[13] = 0x06;
  PacketSpec other = req;
  other.dport = 9999;
  const std::vector<uint8_t> c = buildPacket(other);
  send(peer, arp.data(), arp.size(), 0);
  send(peer, c.data(), c.size(), 0);
  EXPECT_TRUE(receive(*dev, 1, nullptr).empty());
  const XdpCounters counters = (*f)->readCounters();
  EXPECT_EQ(counters.packets[XDP_REDIRECT][IG_R_REQUEST], 1u);
  EXPECT_EQ(counters.packets[XDP_REDIRECT][IG_R_SYN], 1u);
  EXPECT_EQ(counters.packets[XDP_PASS][IG_R_NOT_IP], 1u);
  EXPECT_EQ(counters.packets[XDP_PASS][IG_R_NOT_SERVICE], 1u);

  // Transmit: 200 frames (more than the 64-frame pool: completions are reaped and reused;
  // copy mode sends a bounded batch per kick) arrive on the peer byte-exact.
  timeval tv{0, 100000};
  setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t sent = 0, seen = 0;
  std::vector<uint8_t> buf(2048);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (seen < 200 && std::chrono::steady_clock::now() < deadline) {
    while (sent < 200) {
      Frame fr;
      if (!dev->txAlloc(&fr)) break;
      PacketSpec out = req;
      out.src_mac = {0x02, 0, 0, 0, 0, 0x01};
      out.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
      out.payload = "frame " + std::to_string(sent);
      const std::vector<uint8_t> bytes = buildPacket(out);
      std::memcpy(fr.data, bytes.data(), bytes.size());
      fr.len = static_cast<uint32_t>(bytes.size());
      dev->txBurst(&fr, 1);
      ++sent;
    }
    dev->txFlush();
    for (;;) {
      const ssize_t n = recv(peer, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n <= 0) break;
      // Ours: from ..:01 (the peer also sees its own frames and kernel chatter).
      if (n > 14 && buf[6] == 0x02 && buf[11] == 0x01) {
        PacketSpec want = req;
        want.src_mac = {0x02, 0, 0, 0, 0, 0x01};
        want.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
        want.payload = "frame " + std::to_string(seen);
        EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + n), buildPacket(want)) << seen;
        ++seen;
      }
    }
    if (dev->txPending()) dev->kick();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(seen, 200u);
  for (int i = 0; i < 100 && dev->txFreeFrames() < 64; ++i) {
    dev->kick();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(dev->txFreeFrames(), 64u) << "every tx frame comes back through the completion ring";
  EXPECT_EQ(dev->stats().tx_frames, 200u);
  close(peer);
}

TEST(XskDevice, ZeroCopyRequiredFailsClearlyOnVeth) {
  SKIP_WITHOUT_NETNS();
  XskOptions so = deviceOptions(-1, IG_TAG_PREFIX);
  so.zero_copy = dataplane::xsk::ZeroCopy::kRequire;
  auto dev = XskDevice::open(so);
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(std::string(dev.status().message()).find("zero-copy"), std::string::npos)
      << dev.status();
}

TEST(XskDevice, RxQueueCount) {
  SKIP_WITHOUT_NETNS();
  auto n = dataplane::xsk::rxQueueCount("igx0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1u);
  EXPECT_FALSE(dataplane::xsk::rxQueueCount("nosuchif0").ok());
}

// The TCP stack may keep up to rxHoldBudget() received frames past a burst (out-of-order
// segments held in their frames). Those come from the UMEM's spare rx chunks: with hold_frames
// held, the fill ring still holds rx_frames chunks, so a burst of rx_frames frames sent while
// they are held all arrive (without the spares, half of them would find the fill ring empty).
TEST(XskDevice, HeldFramesDoNotStarveTheFillRing) {
  SKIP_WITHOUT_NETNS();
  std::unique_ptr<XskDevice> dev;
  auto f = attachWithDevice(&dev);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(dev);
  EXPECT_EQ(dev->rxHoldBudget(), 32u);
  EXPECT_EQ(dev->fillRingLevel(), 96u) << "every rx chunk, the spares included, starts there";
  const int peer = packetSocket("igx1");
  ASSERT_GE(peer, 0) << strerror(errno);
  PacketSpec req;
  req.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  auto sendN = [&](int n, const std::string& prefix) {
    for (int i = 0; i < n; ++i) {
      PacketSpec p = req;
      p.payload = prefix + std::to_string(i);
      const std::vector<uint8_t> b = buildPacket(p);
      ASSERT_EQ(send(peer, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
    }
  };
  // Hold 32 frames (never released until the end).
  sendN(32, "held ");
  std::vector<Frame> held;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (held.size() < 32 && std::chrono::steady_clock::now() < deadline) {
    Frame fr[16];
    const size_t n = dev->rxBurst(fr, 16);
    held.insert(held.end(), fr, fr + n);
    if (n == 0) {
      pollfd p{dev->fd(), POLLIN, 0};
      poll(&p, 1, 10);
    }
  }
  ASSERT_EQ(held.size(), 32u);
  EXPECT_EQ(dev->rxOutstanding(), 32u);
  EXPECT_EQ(dev->fillRingLevel(), 64u) << "the spares keep rx_frames chunks in the fill ring";
  // A burst of rx_frames frames while they are held, sent before anything is read.
  sendN(64, "burst ");
  auto got = receive(*dev, 64, nullptr);
  EXPECT_EQ(got.size(), 64u);
  const dataplane::xsk::XskStats st = dev->statsWithKernel();
  EXPECT_EQ(st.rx_dropped, 0u);
  EXPECT_EQ(st.rx_fill_ring_empty, 0u);
  // The held frames are intact and go back; every chunk is in the fill ring again.
  for (size_t i = 0; i < held.size(); ++i) {
    PacketSpec p = req;
    p.payload = "held " + std::to_string(i);
    EXPECT_EQ(std::vector<uint8_t>(held[i].data, held[i].data + held[i].len), buildPacket(p)) << i;
  }
  dev->rxRelease(held.data(), held.size());
  EXPECT_EQ(dev->rxOutstanding(), 0u);
  EXPECT_EQ(dev->fillRingLevel(), 96u);
  close(peer);
}

// The prefix placement's defence: the program prefixes every frame it redirects, so a frame in
// the socket without a valid prefix (here: a program loaded with no tags) cannot be parsed. The
// device drops it (back to the fill ring) and counts it; the stack never sees it.
TEST(XskDevice, PrefixModeDropsFramesWithoutAPrefix) {
  SKIP_WITHOUT_NETNS();
  std::unique_ptr<XskDevice> dev;
  auto f = attachWithDevice(&dev, Placement::kOff, IG_TAG_PREFIX);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tagMode(), IG_TAG_NONE);
  const int peer = packetSocket("igx1");
  ASSERT_GE(peer, 0) << strerror(errno);
  PacketSpec req;
  req.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  req.payload = "GET /v2/health/ready HTTP/1.1\r\n\r\n";
  const std::vector<uint8_t> a = buildPacket(req);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(send(peer, a.data(), a.size(), 0), static_cast<ssize_t>(a.size()));
  EXPECT_TRUE(receive(*dev, 1, nullptr).empty()) << "untagged frames are not handed on";
  EXPECT_EQ(dev->stats().meta_missing, 3u);
  EXPECT_EQ(dev->rxOutstanding(), 0u);
  EXPECT_EQ((*f)->readCounters().packets[XDP_REDIRECT][IG_R_REQUEST], 3u) << "they were redirected";
  close(peer);
}

// Headroom taken by metadata already there (BPF_PROG_TEST_RUN's ctx_in.data), 0 to 252 bytes:
// every frame the program redirects carries its tag (in metadata, or a prefix where the
// metadata could not grow, as on a driver without metadata room) or is dropped and counted as
// no_tag_room, never redirected untagged. Which cases a kernel shows depends on its limits:
// 6.18 grows metadata until the headroom is gone (no prefix fits then either); kernels that
// cap metadata at 32 bytes show the prefix fallback.
TEST_P(XskTags, NoFrameIsRedirectedWithoutItsTag) {
  SKIP_WITHOUT_NETNS();
  LOAD_WITH_SOCKET(f, dev, redirectOptions(GetParam()));
  PacketSpec req;
  req.payload = "GET /v2/health/ready HTTP/1.1\r\n\r\n";
  const std::vector<uint8_t> frame = buildPacket(req);
  int in_meta = 0, in_prefix = 0, dropped = 0;
  for (uint32_t m = 0; m <= 252; m += 4) {
    RunResult r = runXdp((*f)->programFd(), frame, 1, m);
    if (r.err != 0) continue;  // the kernel refuses this much metadata going in
    const std::string at = "metadata in " + std::to_string(m);
    if (r.retval == XDP_DROP) {
      ++dropped;
      EXPECT_EQ(r.meta, std::vector<uint8_t>(m, 0)) << at;
      continue;
    }
    ASSERT_EQ(static_cast<int>(r.retval), XDP_REDIRECT) << at;
    ig_tag t{};
    if (r.meta.size() == m + sizeof(ig_tag)) {
      ASSERT_EQ(GetParam(), Placement::kMetadata) << at;
      ++in_meta;
      std::memcpy(&t, r.meta.data(), sizeof t);
      EXPECT_EQ(r.out, frame) << at;
    } else {
      ++in_prefix;
      ASSERT_EQ(r.meta.size(), m) << at;
      ASSERT_EQ(r.out.size(), frame.size() + sizeof(ig_tag)) << at;
      std::memcpy(&t, r.out.data(), sizeof t);
      EXPECT_EQ(std::vector<uint8_t>(r.out.begin() + sizeof(ig_tag), r.out.end()), frame) << at;
    }
    EXPECT_EQ(t.magic, IG_TAG_MAGIC) << at;
    EXPECT_EQ(t.reason, IG_R_REQUEST) << at;
  }
  std::printf("[   INFO   ] %s: %d frames tagged in metadata, %d by a prefix, %d dropped\n",
              std::string(tagPlacementName(GetParam())).c_str(), in_meta, in_prefix, dropped);
  EXPECT_GT(in_meta + in_prefix, 0);
  EXPECT_GT(dropped, 0) << "some headroom is too small for any tag";
  if (GetParam() == Placement::kPrefix) {
    EXPECT_EQ(in_meta, 0);
  }
  EXPECT_EQ((*f)->readCounters().packets[XDP_DROP][IG_R_NO_TAG_ROOM],
            static_cast<uint64_t>(dropped));
}

// The device in metadata mode reads a prefix-tagged frame (a driver without metadata room):
// stripped, tagged, counted in tag_prefixed; here the program is loaded with the prefix.
TEST(XskDevice, MetadataModeReadsAPrefixTaggedFrame) {
  SKIP_WITHOUT_NETNS();
  std::unique_ptr<XskDevice> dev;
  auto f = attachWithDevice(&dev, Placement::kPrefix, IG_TAG_META);
  ASSERT_TRUE(f.ok()) << f.status();
  const int peer = packetSocket("igx1");
  ASSERT_GE(peer, 0) << strerror(errno);
  PacketSpec req;
  req.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  req.payload = "POST /v2/models/urgent/infer HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::vector<uint8_t> a = buildPacket(req);
  ASSERT_EQ(send(peer, a.data(), a.size(), 0), static_cast<ssize_t>(a.size()));
  std::vector<uint64_t> metas;
  auto got = receive(*dev, 1, &metas);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], a) << "the prefix is stripped";
  auto t = dataplane::xsk::decodeTag(metas[0]);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->cls, 0);
  EXPECT_EQ(t->reason, IG_R_REQUEST);
  EXPECT_EQ(dev->stats().tag_prefixed, 1u);
  EXPECT_EQ(dev->stats().meta_missing, 0u);
  close(peer);
}

INSTANTIATE_TEST_SUITE_P(Placements, XskTags,
                         ::testing::Values(Placement::kMetadata, Placement::kPrefix), placementName);

}  // namespace
}  // namespace infergate::xdp::testing

int main(int argc, char** argv) {
  using infergate::testing::kIgxVethPair;
  return infergate::testing::runInPrivateNetns(
      argc, argv, {"needs root (network namespace, veth, XDP, AF_XDP)", kIgxVethPair, false});
}
