#include "dataplane/ingress_filter/l2_responder.h"

#include <cstring>
#include <string>

#include "common/check.h"
#include "common/checksum.h"

namespace infergate::dataplane::ingress_filter {
namespace {

constexpr uint16_t kEthVlan = 0x8100, kEthQinQ = 0x88A8, kEthArp = 0x0806, kEthIp = 0x0800,
                   kEthIpv6 = 0x86DD;
constexpr uint8_t kIcmpEchoReply = 0, kIcmpEcho = 8;
constexpr uint8_t kIcmp6Echo = 128, kIcmp6EchoReply = 129, kNdSolicit = 135, kNdAdvert = 136;
constexpr uint32_t kNaLen = 32;  // ICMPv6 header 4 + flags 4 + target 16 + TLLA option 8

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// The folded checksum field value of bytes (0 when the bytes, checksum included, verify).
uint16_t csum(const uint8_t* p, size_t n, uint32_t initial = 0) {
  return ig_csum_fold(ig_csum_partial(p, n, initial));
}
// The IPv6 pseudo-header sum for ICMPv6 (RFC 8200 8.1).
uint32_t pseudo6(const uint8_t* src, const uint8_t* dst, uint32_t len) {
  uint32_t s = ig_csum_partial(src, 16, 0);
  s = ig_csum_partial(dst, 16, s);
  return s + (len >> 16) + (len & 0xffff) + 58;
}

// An IPv6 header: next header ICMPv6, `plen` bytes of payload.
void writeIpv6(uint8_t* ip, const uint8_t* src, const uint8_t* dst, uint32_t plen,
               uint8_t hop_limit) {
  std::memset(ip, 0, 4);
  ip[0] = 0x60;
  put16(ip + 4, static_cast<uint16_t>(plen));
  ip[6] = 58;
  ip[7] = hop_limit;
  std::memcpy(ip + 8, src, 16);
  std::memcpy(ip + 24, dst, 16);
}

// An echo reply at `out` to the verified echo request `icmp` (`len` bytes, code 0): the same
// identifier, sequence and data, type `type`, the checksum over `pseudo` (0 for ICMPv4).
void writeEchoReply(uint8_t* out, const uint8_t* icmp, uint32_t len, uint8_t type,
                    uint32_t pseudo) {
  std::memcpy(out, icmp, len);
  out[0] = type;
  out[1] = 0;
  put16(out + 2, 0);
  put16(out + 2, csum(out, len, pseudo));
}

}  // namespace

bool L2Options::enabled() const {
  static constexpr std::array<uint8_t, 16> kZero{};
  return ipv4 != 0 || ipv6 != kZero;
}

absl::Status L2Responder::check(const L2Options& o) {
  if (o.max_replies_per_burst == 0 || o.max_replies_per_burst > kMaxRepliesPerBurst)
    return absl::InvalidArgumentError("dpdk L2 responder: max_replies_per_burst " +
                                      std::to_string(o.max_replies_per_burst) + " (expected 1.." +
                                      std::to_string(kMaxRepliesPerBurst) + ")");
  if (o.enabled() && ((o.mac[0] & 1) || o.mac == std::array<uint8_t, 6>{}))
    return absl::InvalidArgumentError(
        "dpdk L2 responder: the port MAC must be a unicast address (answers come from it)");
  if (o.ipv6[0] == 0xff)
    return absl::InvalidArgumentError("dpdk L2 responder: the IPv6 address is a multicast address");
  return absl::OkStatus();
}

L2Responder::L2Responder(PacketDevice& device, const L2Options& options)
    : device_(device), options_(options) {
  v6_ = options_.ipv6 != std::array<uint8_t, 16>{};
  queued_.reserve(options_.max_replies_per_burst ? options_.max_replies_per_burst : 1);
}

L2Counters L2Responder::counters() const {
  L2Counters c;
  c.arp_replies = arp_replies_.get();
  c.icmp_echo_replies = icmp_echo_replies_.get();
  c.icmp6_echo_replies = icmp6_echo_replies_.get();
  c.nd_adverts = nd_adverts_.get();
  c.not_for_us = not_for_us_.get();
  c.malformed = malformed_.get();
  c.over_budget = over_budget_.get();
  c.no_tx_frame = no_tx_frame_.get();
  return c;
}

L2Responder::Result L2Responder::handle(const uint8_t* f, uint32_t len) {
  if (!enabled() || len < 14) {
    not_for_us_.inc();
    return Result::kIgnored;
  }
  uint32_t l2 = 14;
  uint16_t type = be16(f + 12);
  if (type == kEthVlan || type == kEthQinQ) {
    if (len < 18) {
      malformed_.inc();
      return Result::kIgnored;
    }
    l2 = 18;
    type = be16(f + 16);
  }
  switch (type) {
    case kEthArp:
      if (options_.ipv4 != 0) return arp(f, len, l2);
      break;
    case kEthIp:
      if (options_.ipv4 != 0) return icmp4(f, len, l2);
      break;
    case kEthIpv6:
      if (v6_) return icmp6(f, len, l2);
      break;
    default:
      break;
  }
  not_for_us_.inc();
  return Result::kIgnored;
}

L2Responder::Result L2Responder::begin(const uint8_t* f, uint32_t l2, uint32_t len,
                                       const uint8_t* dst, uint16_t type, Frame* out) {
  if (queued_.size() >= options_.max_replies_per_burst) {
    over_budget_.inc();
    return Result::kOverBudget;
  }
  if (!device_.txAlloc(out)) {
    no_tx_frame_.inc();
    return Result::kNoTxFrame;
  }
  // packet_io.h: a transmit frame holds mtu() + 14 bytes, and every answer was checked
  // against that before begin(); a device that breaks it would make us write past a frame.
  IG_CHECK(out->capacity >= len, "PacketDevice::txAlloc gave {} bytes, less than mtu + 14 ({})",
           out->capacity, len);
  uint8_t* o = out->data;
  std::memcpy(o, dst, 6);
  std::memcpy(o + 6, options_.mac.data(), 6);
  if (l2 == 18) std::memcpy(o + 12, f + 12, 4);  // the VLAN tag, as received
  put16(o + l2 - 2, type);
  return Result::kAnswered;
}

void L2Responder::queue(Frame& out, uint32_t len, Counter& counter) {
  out.len = len;
  queued_.push_back(out);
  counter.inc();
}

L2Responder::Result L2Responder::arp(const uint8_t* f, uint32_t len, uint32_t l2) {
  if (len < l2 + 28) {
    malformed_.inc();
    return Result::kIgnored;
  }
  const uint8_t* a = f + l2;
  if (be16(a) != 1 || be16(a + 2) != kEthIp || a[4] != 6 || a[5] != 4) {
    malformed_.inc();
    return Result::kIgnored;
  }
  if (be16(a + 6) != 1 || std::memcmp(a + 24, &options_.ipv4, 4) != 0) {
    not_for_us_.inc();  // a reply, or a request for another address: nothing learnt
    return Result::kIgnored;
  }
  Frame out;  // to the sender's hardware address
  if (Result r = begin(f, l2, l2 + 28, a + 8, kEthArp, &out); r != Result::kAnswered) return r;
  uint8_t* r = out.data + l2;
  put16(r, 1);
  put16(r + 2, kEthIp);
  r[4] = 6;
  r[5] = 4;
  put16(r + 6, 2);                             // reply
  std::memcpy(r + 8, options_.mac.data(), 6);  // sender: us
  std::memcpy(r + 14, &options_.ipv4, 4);
  std::memcpy(r + 18, a + 8, 6);  // target: the requester
  std::memcpy(r + 24, a + 14, 4);
  queue(out, l2 + 28, arp_replies_);
  return Result::kAnswered;
}

L2Responder::Result L2Responder::icmp4(const uint8_t* f, uint32_t len, uint32_t l2) {
  if (len < l2 + 20) {
    malformed_.inc();
    return Result::kIgnored;
  }
  const uint8_t* ip = f + l2;
  const uint32_t ihl = (ip[0] & 0x0f) * 4u;
  const uint32_t tot = be16(ip + 2);
  if ((ip[0] >> 4) != 4 || ihl < 20 || tot < ihl || l2 + tot > len) {
    malformed_.inc();
    return Result::kIgnored;
  }
  if (ip[9] != 1 || std::memcmp(ip + 16, &options_.ipv4, 4) != 0) {
    not_for_us_.inc();
    return Result::kIgnored;
  }
  const uint8_t* icmp = ip + ihl;
  const uint32_t icmp_len = tot - ihl;
  if ((be16(ip + 6) & 0x3fff) != 0 || icmp_len < 8 || csum(ip, ihl) != 0 ||
      csum(icmp, icmp_len) != 0) {
    malformed_.inc();  // a fragment (nothing reassembles here), short, or a bad checksum
    return Result::kIgnored;
  }
  if (icmp[0] != kIcmpEcho || icmp[1] != 0) {
    not_for_us_.inc();
    return Result::kIgnored;
  }
  const uint32_t out_len = l2 + 20 + icmp_len;
  if (out_len > device_.mtu() + 14) {
    malformed_.inc();  // larger than our MTU: no answer without fragmenting
    return Result::kIgnored;
  }
  Frame out;
  if (Result r = begin(f, l2, out_len, f + 6, kEthIp, &out); r != Result::kAnswered) return r;
  uint8_t* rip = out.data + l2;
  rip[0] = 0x45;
  rip[1] = ip[1];  // TOS as received
  put16(rip + 2, static_cast<uint16_t>(20 + icmp_len));
  std::memcpy(rip + 4, ip + 4, 2);  // identification as received
  put16(rip + 6, 0);
  rip[8] = 64;
  rip[9] = 1;
  put16(rip + 10, 0);
  std::memcpy(rip + 12, &options_.ipv4, 4);
  std::memcpy(rip + 16, ip + 12, 4);
  put16(rip + 10, csum(rip, 20));
  writeEchoReply(rip + 20, icmp, icmp_len, kIcmpEchoReply, 0);
  queue(out, out_len, icmp_echo_replies_);
  return Result::kAnswered;
}

L2Responder::Result L2Responder::icmp6(const uint8_t* f, uint32_t len, uint32_t l2) {
  if (len < l2 + 40) {
    malformed_.inc();
    return Result::kIgnored;
  }
  const uint8_t* ip = f + l2;
  const uint32_t plen = be16(ip + 4);
  if ((ip[0] >> 4) != 6 || l2 + 40 + plen > len) {
    malformed_.inc();
    return Result::kIgnored;
  }
  if (ip[6] != 58) {  // extension headers included: not parsed here
    not_for_us_.inc();
    return Result::kIgnored;
  }
  const uint8_t* icmp = ip + 40;
  if (plen < 8 || csum(icmp, plen, pseudo6(ip + 8, ip + 24, plen)) != 0) {
    malformed_.inc();
    return Result::kIgnored;
  }
  const uint8_t* ours = options_.ipv6.data();
  if (icmp[0] == kIcmp6Echo && icmp[1] == 0 && std::memcmp(ip + 24, ours, 16) == 0) {
    const uint32_t out_len = l2 + 40 + plen;
    if (out_len > device_.mtu() + 14) {
      malformed_.inc();  // larger than our MTU: no answer without fragmenting
      return Result::kIgnored;
    }
    Frame out;
    if (Result r = begin(f, l2, out_len, f + 6, kEthIpv6, &out); r != Result::kAnswered) return r;
    uint8_t* rip = out.data + l2;
    writeIpv6(rip, ours, ip + 8, plen, 64);
    writeEchoReply(rip + 40, icmp, plen, kIcmp6EchoReply, pseudo6(ours, ip + 8, plen));
    queue(out, out_len, icmp6_echo_replies_);
    return Result::kAnswered;
  }
  if (icmp[0] == kNdSolicit && icmp[1] == 0 && plen >= 24 && std::memcmp(icmp + 8, ours, 16) == 0) {
    if (ip[7] != 255) {  // RFC 4861 7.1.1: not from a neighbour
      malformed_.inc();
      return Result::kIgnored;
    }
    static constexpr uint8_t kUnspecified[16] = {};
    static constexpr uint8_t kAllNodes[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static constexpr uint8_t kAllNodesMac[6] = {0x33, 0x33, 0, 0, 0, 1};
    // From the unspecified address (duplicate address detection): to all nodes, not solicited.
    const bool dad = std::memcmp(ip + 8, kUnspecified, 16) == 0;
    const uint32_t out_len = l2 + 40 + kNaLen;
    Frame out;
    if (Result r = begin(f, l2, out_len, dad ? kAllNodesMac : f + 6, kEthIpv6, &out);
        r != Result::kAnswered)
      return r;
    uint8_t* rip = out.data + l2;
    writeIpv6(rip, ours, dad ? kAllNodes : ip + 8, kNaLen, 255);
    uint8_t* na = rip + 40;
    na[0] = kNdAdvert;
    na[1] = 0;
    put16(na + 2, 0);
    na[4] = dad ? 0x20 : 0x60;  // (S)olicited unless DAD, (O)verride
    na[5] = na[6] = na[7] = 0;
    std::memcpy(na + 8, ours, 16);
    na[24] = 2;  // target link-layer address
    na[25] = 1;  // 8 bytes
    std::memcpy(na + 26, options_.mac.data(), 6);
    put16(na + 2, csum(na, kNaLen, pseudo6(rip + 8, rip + 24, kNaLen)));
    queue(out, out_len, nd_adverts_);
    return Result::kAnswered;
  }
  not_for_us_.inc();
  return Result::kIgnored;
}

void L2Responder::flush() {
  if (queued_.empty()) return;
  device_.txBurst(queued_.data(), queued_.size());
  device_.txFlush();
  queued_.clear();
}

}  // namespace infergate::dataplane::ingress_filter
