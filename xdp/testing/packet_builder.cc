#include "xdp/testing/packet_builder.h"

#include <arpa/inet.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "common/checksum.h"

namespace infergate::xdp::testing {
namespace {

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, static_cast<uint16_t>(v >> 16));
  put16(b, static_cast<uint16_t>(v));
}
void set16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v >> 8);
  b[off + 1] = static_cast<uint8_t>(v);
}
uint16_t get16(const std::vector<uint8_t>& b, size_t off) {
  return static_cast<uint16_t>((b[off] << 8) | b[off + 1]);
}

std::vector<uint8_t> addr(const std::string& text, bool v6) {
  std::vector<uint8_t> out(v6 ? 16 : 4);
  if (inet_pton(v6 ? AF_INET6 : AF_INET, text.c_str(), out.data()) != 1)
    throw std::invalid_argument("bad address " + text);
  return out;
}

}  // namespace

uint16_t inetChecksum(const uint8_t* p, size_t n, uint32_t initial) {
  return ig_csum_fold(ig_csum_partial(p, n, initial));
}

std::vector<uint8_t> buildPacket(const PacketSpec& s) {
  std::vector<uint8_t> b;
  b.insert(b.end(), s.dst_mac.begin(), s.dst_mac.end());
  b.insert(b.end(), s.src_mac.begin(), s.src_mac.end());
  for (uint16_t tci : s.vlans) {
    put16(b, 0x8100);
    put16(b, tci);
  }
  put16(b, s.ethertype ? *s.ethertype : (s.ipv6 ? 0x86dd : 0x0800));

  // L4
  std::vector<uint8_t> l4;
  if (s.raw_l4) {
    l4 = *s.raw_l4;
  } else {
    std::vector<uint8_t> opts = s.tcp_options;
    while (opts.size() % 4) opts.push_back(0);  // EOL padding
    put16(l4, s.sport);
    put16(l4, s.dport);
    put32(l4, s.seq);
    put32(l4, s.ack);
    l4.push_back(static_cast<uint8_t>(((20 + opts.size()) / 4) << 4));
    l4.push_back(s.flags);
    put16(l4, s.window);
    put16(l4, 0);  // checksum
    put16(l4, 0);  // urgent
    l4.insert(l4.end(), opts.begin(), opts.end());
    l4.insert(l4.end(), s.payload.begin(), s.payload.end());
  }
  auto src = addr(s.src, s.ipv6), dst = addr(s.dst, s.ipv6);
  uint32_t pseudo = 0;
  pseudo = ig_csum_partial(src.data(), src.size(), pseudo);
  pseudo = ig_csum_partial(dst.data(), dst.size(), pseudo);
  pseudo += s.ip_proto + static_cast<uint32_t>(l4.size());
  if (!s.raw_l4 && s.ip_proto == 6) set16(l4, 16, inetChecksum(l4.data(), l4.size(), pseudo));

  if (s.ipv6) {
    put32(b, 0x60000000);
    put16(b, static_cast<uint16_t>(l4.size()));
    b.push_back(s.ip_proto);
    b.push_back(s.ttl);
    b.insert(b.end(), src.begin(), src.end());
    b.insert(b.end(), dst.begin(), dst.end());
  } else {
    std::vector<uint8_t> opts = s.ip_options;
    while (opts.size() % 4) opts.push_back(0);
    size_t ip_off = b.size();
    size_t ihl = 20 + opts.size();
    b.push_back(static_cast<uint8_t>(0x40 | (ihl / 4)));
    b.push_back(0);
    put16(b, static_cast<uint16_t>(ihl + l4.size()));
    put16(b, s.ip_id);
    put16(b, s.frag);
    b.push_back(s.ttl);
    b.push_back(s.ip_proto);
    put16(b, 0);
    b.insert(b.end(), src.begin(), src.end());
    b.insert(b.end(), dst.begin(), dst.end());
    b.insert(b.end(), opts.begin(), opts.end());
    set16(b, ip_off + 10, inetChecksum(b.data() + ip_off, ihl));
  }
  b.insert(b.end(), l4.begin(), l4.end());
  return b;
}

PacketSpec flow(uint16_t sport, uint8_t flags, std::string payload, std::string src) {
  PacketSpec s;
  s.sport = sport;
  s.flags = flags;
  s.payload = std::move(payload);
  s.src = std::move(src);
  if (flags == kSyn) s.ack = 0;
  return s;
}

PacketSpec replyTo(const PacketSpec& s) {
  PacketSpec r;
  r.dst_mac = s.src_mac;
  r.src_mac = s.dst_mac;
  r.vlans = s.vlans;
  r.ipv6 = s.ipv6;
  r.src = s.dst;
  r.dst = s.src;
  r.ttl = 64;
  r.ip_id = 0;
  r.frag = 0x4000;
  r.sport = s.dport;
  r.dport = s.sport;
  return r;
}

PacketSpec rstFor(const PacketSpec& s) {
  PacketSpec r = replyTo(s);
  r.seq = (s.flags & kAck) ? s.ack : 0;
  r.ack = s.seq + static_cast<uint32_t>(s.payload.size()) + ((s.flags & kSyn) ? 1 : 0) +
          ((s.flags & kFin) ? 1 : 0);
  r.flags = kRst | kAck;
  r.window = 0;
  return r;
}

bool checksumsValid(const std::vector<uint8_t>& f) {
  size_t off = 12;
  while (off + 2 <= f.size() && get16(f, off) == 0x8100) off += 4;
  if (off + 2 > f.size()) return false;
  uint16_t et = get16(f, off);
  off += 2;
  if (et == 0x0800) {
    size_t ihl = (f[off] & 0x0f) * 4u;
    if (inetChecksum(f.data() + off, ihl) != 0) return false;
    size_t tot = get16(f, off + 2);
    uint32_t pseudo =
        ig_csum_partial(f.data() + off + 12, 8, 0) + 6 + static_cast<uint32_t>(tot - ihl);
    return inetChecksum(f.data() + off + ihl, tot - ihl, pseudo) == 0;
  }
  if (et == 0x86dd) {
    size_t plen = get16(f, off + 4);
    uint32_t pseudo = ig_csum_partial(f.data() + off + 8, 32, 0) + 6 + static_cast<uint32_t>(plen);
    return inetChecksum(f.data() + off + 40, plen, pseudo) == 0;
  }
  return false;
}

std::string hex(const std::vector<uint8_t>& b) {
  std::string out;
  for (size_t i = 0; i < b.size(); ++i) {
    out += fmt::format("{:02x}", b[i]);
    if (i % 16 == 15) out += '\n';
    else if (i % 2 == 1) out += ' ';
  }
  return out;
}

}  // namespace infergate::xdp::testing
