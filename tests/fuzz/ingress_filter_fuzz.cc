// libFuzzer target: dpdk mode's ingress filter (dataplane/ingress_filter: FilteringDevice and
// its L2Responder), the XDP program's rules run in userspace on each received burst, over the
// tests' FakePacketDevice. Every frame a DPDK port receives goes through it first: it is the
// first code of dpdk mode to read a hostile network's bytes, with state of its own (flow
// slots, per-source token buckets, CIDR rules, the overload level, SYN cookie keys) and its own
// parsers (ARP, ICMP echo, ICMPv6 echo and neighbour solicitation, with VLAN tags).
//
// Input: [k0][k1][k2][records...]
//   k0, k1: the program's configuration knobs (tests/fuzz/xdp_fuzz_config.h makeConfig)
//   k2: bit 0 SYN and request rate limits (2/s, burst 2), bit 1 CIDR rules (classes, an
//       exempt and trusted host, an IPv6 class), bit 2 priority header from every source,
//       bit 3 ARP/ICMP answers for 10.0.0.1 and fd00::1, bit 4 one answer per burst (else
//       32), bits 5-6 transmit frames (unlimited, 0, 1, 3), bit 7 MTU 9000 (else 1500)
//   records, by op & 3:
//     0 frame: [lo][hi] length (capped by what is left), then the frame's bytes, queued
//       (an empty one is skipped)
//     1 burst: rxBurst(max = 1 + (op >> 2) * 5: 1..316, over kMaxBurst); what passed is
//       checked and released
//     2 clock: advances (op >> 2) << (next byte & 31) ns
//     3 control, by (op >> 2) & 3: 0 overload level (op >> 4) & 3; 1 setRules with the
//       next two bytes as k0, k1 (prepareRules with the same CIDR rules); 2 cookie keys set
//       (op bit 4: generation) or cleared (op bit 5); 3 a burst that holds what passed until
//       the end (a stack holding out-of-order data)
// At the end, bursts until the device has nothing left; then every frame is released.
//
// Invariants: frames come out in arrival order (the fake's handles increase) and only frames
// the device delivered; every delivered frame is counted exactly once (packets and bytes,
// summed over (action, reason)); passed = XDP_REDIRECT + XDP_PASS counts; a passed frame's
// meta is a valid tag (class < IG_NUM_CLASSES or none, a known verdict) with the NIC's
// checksum bits kept; request tags = the (class, verdict) counts; XDP_TX = answers sent = the
// responder's reply counters; every answer is well-formed (our MAC and address as the source,
// ARP reply fields, IPv4 header, ICMP and ICMPv6 checksums verified with the TCP stack's own
// checksum code, not the responder's); after the releases nothing is outstanding, released
// twice or unknown. ASan sees any read of a frame past its end or after its release.
#include <arpa/inet.h>
#include <linux/bpf.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/cidr.h"
#include "common/clock.h"
#include "dataplane/ingress_filter/ingress_filter.h"
#include "dataplane/tcp/fake_device.h"
#include "dataplane/tcp/frame_tag.h"
#include "dataplane/tcp/packet.h"
#include "tests/fuzz/xdp_fuzz_config.h"

namespace {

namespace dp = infergate::dataplane;
namespace ifl = infergate::dataplane::ingress_filter;
namespace tcp = infergate::dataplane::tcp;

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fuzz_ingress_filter: invariant failed at %s:%d: %s\n", __FILE__, \
                   __LINE__, #cond);                                                         \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

constexpr std::array<uint8_t, 6> kMac{0x02, 0, 0, 0, 0, 0x01};
const uint8_t kIp6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint16_t fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(s);
}
// True when the bytes (their checksum field included) sum to 0xffff.
bool verifies(const uint8_t* p, size_t n, uint32_t initial = 0) {
  return fold(tcp::checksumPartial(p, n, initial)) == 0xffff;
}

std::vector<ifl::CidrRule> cidrRules(bool on) {
  std::vector<ifl::CidrRule> r;
  if (!on) return r;
  auto add = [&](const char* text, uint8_t cls, uint8_t exempt, uint8_t trusted) {
    auto c = infergate::common::parseCidr(text);
    FUZZ_CHECK(c.ok());
    r.push_back({*c, cls, exempt, trusted});
  };
  add("10.0.0.0/24", 2, 0, 0);
  add("10.0.0.2", IG_CLASS_NONE, 1, 1);
  add("10.0.0.9", 0, 0, 1);
  add("fd00::/64", 1, 0, 0);
  add("0.0.0.0/0", 3, 0, 0);
  return r;
}

ig_config configFor(uint8_t k0, uint8_t k1, uint8_t k2) {
  ig_config c = infergate::fuzz::makeConfig(k0, k1);
  // dpdk mode's own: the tag travels in Frame::meta, the stack answers SYNs and sends RSTs.
  c.tag_mode = c.redirect_xsk = c.syn_cookies = c.tx_redirect = 0;
  if (k2 & 1) c.syn_rate = c.syn_burst = c.req_rate = c.req_burst = 2;
  c.cidr_rules = c.cidr_classes = (k2 >> 1) & 1;
  if (k2 & 4) c.priority_header = IG_PRIO_HDR_ALL;
  return c;
}

// An ARP, ICMP echo, ICMPv6 echo or neighbour advertisement answer, as a peer would read it.
void checkAnswer(const std::vector<uint8_t>& f, const ifl::L2Options& l2) {
  FUZZ_CHECK(f.size() >= 14);
  FUZZ_CHECK(std::memcmp(f.data() + 6, l2.mac.data(), 6) == 0);
  size_t l2len = 12;
  uint16_t type = be16(f.data() + l2len);
  if (type == 0x8100 || type == 0x88A8) {
    FUZZ_CHECK(f.size() >= 18);
    l2len += 4;
    type = be16(f.data() + l2len);
  }
  l2len += 2;
  const uint8_t* p = f.data() + l2len;
  const size_t n = f.size() - l2len;
  if (type == 0x0806) {
    FUZZ_CHECK(n >= 28);
    FUZZ_CHECK(be16(p) == 1 && be16(p + 2) == 0x0800 && p[4] == 6 && p[5] == 4);
    FUZZ_CHECK(be16(p + 6) == 2);                           // reply
    FUZZ_CHECK(std::memcmp(p + 8, l2.mac.data(), 6) == 0);  // sender: us
    FUZZ_CHECK(std::memcmp(p + 14, &l2.ipv4, 4) == 0);
    return;
  }
  if (type == 0x0800) {
    FUZZ_CHECK(n >= 20 && (p[0] >> 4) == 4);
    const size_t ihl = (p[0] & 0xf) * 4u;
    const size_t total = be16(p + 2);
    FUZZ_CHECK(ihl >= 20 && total >= ihl + 8 && total <= n);
    FUZZ_CHECK(verifies(p, ihl));
    FUZZ_CHECK(p[9] == 1 && std::memcmp(p + 12, &l2.ipv4, 4) == 0);
    FUZZ_CHECK(p[ihl] == 0 && p[ihl + 1] == 0);  // echo reply
    FUZZ_CHECK(verifies(p + ihl, total - ihl));
    return;
  }
  FUZZ_CHECK(type == 0x86DD);
  FUZZ_CHECK(n >= 40 + 8 && (p[0] >> 4) == 6 && p[6] == 58);
  const uint32_t plen = be16(p + 4);
  FUZZ_CHECK(40 + plen <= n && plen >= 8);
  FUZZ_CHECK(std::memcmp(p + 8, l2.ipv6.data(), 16) == 0);
  uint32_t pseudo = tcp::checksumPartial(p + 8, 32, 0) + plen + 58;
  FUZZ_CHECK(verifies(p + 40, plen, pseudo));
  const uint8_t icmp_type = p[40];
  FUZZ_CHECK(icmp_type == 129 || icmp_type == 136);
  if (icmp_type == 136) {
    FUZZ_CHECK(plen >= 32 && p[7] == 255);                     // RFC 4861 7.1.2
    FUZZ_CHECK(std::memcmp(p + 48, l2.ipv6.data(), 16) == 0);  // target: our address
    FUZZ_CHECK(p[64] == 2 && p[65] == 1);                      // target link-layer option
    FUZZ_CHECK(std::memcmp(p + 66, l2.mac.data(), 6) == 0);
  }
}

struct Harness {
  Harness(uint8_t k0, uint8_t k1, uint8_t k2) : dev((k2 & 0x80) ? 9000 : 1500, 16), k2_(k2) {
    static constexpr int64_t kTxLimit[4] = {-1, 0, 1, 3};
    dev.tx_limit = kTxLimit[(k2 >> 5) & 3];
    ifl::FilterOptions o;
    o.config = configFor(k0, k1, k2);
    o.cidrs = cidrRules(o.config.cidr_rules);
    o.bucket_entries = 16;  // 4 sets of 4 ways: evictions
    o.flow_secret = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    if (k2 & 8) {
      o.l2.mac = kMac;
      o.l2.ipv4 = htonl(0x0a000001);
      std::memcpy(o.l2.ipv6.data(), kIp6, 16);
      o.l2.max_replies_per_burst = (k2 & 0x10) ? 1 : 32;
    }
    l2 = o.l2;
    auto f = ifl::FilteringDevice::create(dev, o, clock);
    FUZZ_CHECK(f.ok());
    filter = std::move(*f);
  }

  void inject(const uint8_t* p, size_t n, uint64_t nic_bits) {
    dev.inject(std::vector<uint8_t>(p, p + n), nic_bits);
    lengths.push_back(n);
    ++delivered;
  }

  // One burst; what passed is checked, then released (or held until the end).
  size_t burst(size_t max, bool hold) {
    std::vector<dp::Frame> fr(max);
    const size_t before = dev.outstanding();
    const size_t n = filter->rxBurst(fr.data(), max);
    FUZZ_CHECK(n <= max && n <= ifl::FilteringDevice::kMaxBurst);
    // What was dropped or answered is back with the device; what passed is with us.
    FUZZ_CHECK(dev.outstanding() == before + n);
    for (size_t i = 0; i < n; ++i) {
      const dp::Frame& f = fr[i];
      FUZZ_CHECK(f.handle > last_handle);  // arrival order, each frame once
      last_handle = f.handle;
      FUZZ_CHECK(f.data != nullptr && f.len >= 14);
      checkMeta(f);
    }
    passed += n;
    if (hold) {
      held.insert(held.end(), fr.begin(), fr.begin() + static_cast<ptrdiff_t>(n));
    } else {
      filter->rxRelease(fr.data(), n);
    }
    checkCounters();
    return n;
  }

  void checkMeta(const dp::Frame& f) {
    const uint64_t tag = f.meta & ~dp::kMetaRxChecksumMask;
    FUZZ_CHECK((f.meta & dp::kMetaRxChecksumMask) == nic_bits_of(f));
    if (tag == 0) {  // TCP to another port: no tag
      ++untagged;
      return;
    }
    FUZZ_CHECK(tcp::metaValid(tag));
    FUZZ_CHECK((tag >> 33) == 0);
    const uint8_t cls = tcp::metaClass(tag), verdict = tcp::metaVerdict(tag);
    const uint8_t reason = tcp::metaReason(tag);
    FUZZ_CHECK(cls < IG_NUM_CLASSES || cls == IG_CLASS_NONE);
    FUZZ_CHECK(verdict == tcp::kVerdictAdmit || verdict == tcp::kVerdictRateLimited ||
               verdict == tcp::kVerdictOverload);
    FUZZ_CHECK(reason < IG_R_MAX);
    if (reason == IG_R_REQUEST) {
      FUZZ_CHECK(cls < IG_NUM_CLASSES);
      ++requests;
    }
    if (tcp::metaFlags(tag) & tcp::kTagRejected) FUZZ_CHECK(cls == IG_CLASS_NONE);
  }
  // The NIC's checksum bits a frame was injected with: derived from its length, so that they
  // can be checked without a table (inject() below uses the same rule).
  static uint64_t nic_bits_of(const dp::Frame& f) { return nicBits(f.len); }
  static uint64_t nicBits(size_t len) {
    return ((len & 1) ? dp::kMetaRxIpChecksumGood : 0) |
           ((len & 2) ? dp::kMetaRxL4ChecksumGood : 0);
  }

  void checkCounters() {
    const ifl::IngressCounters c = filter->counters();
    uint64_t packets = 0, bytes = 0, requests_counted = 0;
    for (size_t a = 0; a < IG_NUM_ACTIONS; ++a) {
      for (size_t r = 0; r < IG_R_MAX; ++r) {
        packets += c.packets[a][r];
        bytes += c.bytes[a][r];
      }
    }
    for (const auto& cls : c.requests)
      for (uint64_t v : cls) requests_counted += v;
    // The frames judged so far are the first ones queued (the device serves them in order).
    const size_t judged = taken_by_filter();
    FUZZ_CHECK(packets == judged);
    uint64_t judged_bytes = 0;
    for (size_t j = 0; j < judged; ++j) judged_bytes += lengths[j];
    FUZZ_CHECK(bytes == judged_bytes);
    uint64_t redirect = 0, pass = 0, tx = 0;
    for (size_t r = 0; r < IG_R_MAX; ++r) {
      redirect += c.packets[XDP_REDIRECT][r];
      pass += c.packets[XDP_PASS][r];
      tx += c.packets[XDP_TX][r];
    }
    FUZZ_CHECK(redirect + pass == passed);
    FUZZ_CHECK(pass == c.packets[XDP_PASS][IG_R_NOT_SERVICE]);
    FUZZ_CHECK(pass == untagged);
    FUZZ_CHECK(requests_counted == requests);
    // Every answer the responder counted went out, and only those.
    const ifl::L2Counters l = filter->l2Counters();
    const uint64_t answers =
        l.arp_replies + l.icmp_echo_replies + l.icmp6_echo_replies + l.nd_adverts;
    FUZZ_CHECK(answers == tx);
    FUZZ_CHECK(dev.tx_frames == tx);
    if (!l2.enabled()) FUZZ_CHECK(tx == 0);
    while (!dev.sent.empty()) {
      checkAnswer(dev.sent.front(), l2);
      dev.sent.pop_front();
    }
  }
  size_t taken_by_filter() const { return dev.released_ + dev.outstanding(); }

  void finish() {
    while (taken_by_filter() < delivered) burst(64, false);
    filter->rxRelease(held.data(), held.size());
    held.clear();
    checkCounters();
    FUZZ_CHECK(dev.outstanding() == 0);
    FUZZ_CHECK(dev.double_releases == 0 && dev.unknown_releases == 0);
    FUZZ_CHECK(dev.released_ == delivered);
  }

  tcp::FakePacketDevice dev;
  infergate::common::ManualClock clock;
  std::unique_ptr<ifl::FilteringDevice> filter;
  ifl::L2Options l2;
  uint8_t k2_;
  std::vector<dp::Frame> held;
  std::vector<size_t> lengths;  // of every frame queued, in order
  size_t delivered = 0, passed = 0, untagged = 0, requests = 0;
  uint64_t last_handle = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  Harness h(data[0], data[1], data[2]);
  size_t i = 3;
  const auto byte = [&]() -> uint8_t { return i < size ? data[i++] : 0; };
  while (i < size) {
    const uint8_t op = data[i++];
    switch (op & 3) {
      case 0: {
        size_t len = byte();
        len |= static_cast<size_t>(byte()) << 8;
        if (len > size - i) len = size - i;
        // A device never hands out a frame without bytes (the fake's would have no address).
        if (len > 0) h.inject(data + i, len, Harness::nicBits(len));
        i += len;
        break;
      }
      case 1:
        h.burst(1 + (op >> 2) * 5u, false);
        break;
      case 2:
        h.clock.advanceNs(static_cast<uint64_t>(op >> 2) << (byte() & 31));
        break;
      default:
        switch ((op >> 2) & 3) {
          case 0:
            h.filter->setOverloadLevel((op >> 4) & 3);
            break;
          case 1: {
            const uint8_t k0 = byte(), k1 = byte();
            const ig_config c = configFor(k0, k1, h.k2_);
            auto rules = ifl::FilteringDevice::prepareRules(c, cidrRules(c.cidr_rules));
            FUZZ_CHECK(rules.ok());
            const uint64_t gen = h.filter->rulesGeneration();
            FUZZ_CHECK(h.filter->setRules(*rules).ok());
            FUZZ_CHECK(h.filter->rulesGeneration() == gen + 1);
            break;
          }
          case 2: {
            ig_cookie_keys k{};
            if (!(op & 0x20)) {
              k.key[0] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
              k.key[1] = {0x1716151413121110ull, 0x1f1e1d1c1b1a1918ull};
              k.gen = (op >> 4) & 1;
            }
            h.filter->setCookieKeys(k);
            break;
          }
          default:
            h.burst(32, true);
            break;
        }
    }
  }
  h.finish();
  return 0;
}
