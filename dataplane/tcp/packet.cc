#include "dataplane/tcp/packet.h"

#include "common/checksum.h"

namespace infergate::dataplane::tcp {
namespace {

inline uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}
inline void wr16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void wr32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

// Pseudo-header sum for TCP over IPv4/IPv6.
uint32_t pseudoSum(const uint8_t* src, const uint8_t* dst, bool v6, uint32_t tcp_len) {
  uint32_t sum = 0;
  if (v6) {
    sum = checksumPartial(src, 16, sum);
    sum = checksumPartial(dst, 16, sum);
  } else {  // four 16-bit terms: no call
    sum = static_cast<uint32_t>(rd16(src)) + rd16(src + 2) + rd16(dst) + rd16(dst + 2);
  }
  sum += 6;  // protocol
  sum += tcp_len & 0xffff;
  sum += tcp_len >> 16;
  return sum;
}

bool parseOptions(const uint8_t* p, size_t len, TcpOptionValues& o) {
  size_t i = 0;
  while (i < len) {
    const uint8_t kind = p[i];
    if (kind == 0) break;  // end of options
    if (kind == 1) {
      ++i;
      continue;
    }
    if (i + 1 >= len) return false;
    const uint8_t olen = p[i + 1];
    if (olen < 2 || i + olen > len) return false;
    const uint8_t* v = p + i + 2;
    switch (kind) {
      case 2:
        if (olen == 4) {
          o.has_mss = true;
          o.mss = rd16(v);
        }
        break;
      case 3:
        if (olen == 3) o.wscale = static_cast<int8_t>(v[0] > 14 ? 14 : v[0]);
        break;
      case 4:
        if (olen == 2) o.sack_permitted = true;
        break;
      case 5: {
        const int n = (olen - 2) / 8;
        if ((olen - 2) % 8 != 0 || n < 1 || n > kMaxSackBlocks) break;
        o.num_sack = static_cast<uint8_t>(n);
        for (int b = 0; b < n; ++b) {
          o.sack[b][0] = rd32(v + 8 * b);
          o.sack[b][1] = rd32(v + 8 * b + 4);
        }
        break;
      }
      case 8:
        if (olen == 10) {
          o.has_ts = true;
          o.ts_val = rd32(v);
          o.ts_ecr = rd32(v + 4);
        }
        break;
      default:
        break;  // unknown options are skipped
    }
    i += olen;
  }
  return true;
}

}  // namespace

// Native-order 64-bit words with end-around carry (add + adc), four a step, folded, then
// swapped into the big-endian terms ig_csum_partial adds (RFC 1071 2(B): the sum does not
// depend on byte order). The stack sums every frame twice (verified in, computed out), which
// the byte-wise big-endian loop made a third of its instructions per request;
// common/checksum.h keeps that loop for the XDP program and the test builders.
namespace {
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// s += w with the carry out counted (each is worth 1: 2^64 = 1 mod 2^16 - 1).
inline void addc(uint64_t& s, uint64_t& carries, uint64_t w) {
  carries += __builtin_add_overflow(s, w, &s);
}
}  // namespace

uint32_t checksumPartial(const uint8_t* p, size_t len, uint32_t sum) {
  uint64_t s = 0, carries = 0;
  for (; len >= 32; p += 32, len -= 32) {
    addc(s, carries, load64(p));
    addc(s, carries, load64(p + 8));
    addc(s, carries, load64(p + 16));
    addc(s, carries, load64(p + 24));
  }
  for (; len >= 8; p += 8, len -= 8) addc(s, carries, load64(p));
  // The last 0..7 bytes, each at bit 8 x its offset (its place in a native word; pad zero).
  uint64_t tail = 0;
  unsigned shift = 0;
  if (len & 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    tail = v;
    p += 4;
    shift = 32;
  }
  if (len & 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    tail |= static_cast<uint64_t>(v) << shift;
    p += 2;
    shift += 16;
  }
  if (len & 1) tail |= static_cast<uint64_t>(*p) << shift;
  addc(s, carries, tail);
  // Fold: the 64-bit sum as four 16-bit terms plus the carries (few: < 2^58).
  uint64_t f = (s & 0xffff) + ((s >> 16) & 0xffff) + ((s >> 32) & 0xffff) + (s >> 48) + carries;
  f = (f & 0xffff) + (f >> 16);
  f = (f & 0xffff) + (f >> 16);
  f = (f & 0xffff) + (f >> 16);
  f = (f & 0xffff) + (f >> 16);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  f = ((f & 0xff) << 8) | (f >> 8);
#endif
  uint64_t t = f + sum;
  t = (t & 0xffff) + (t >> 16);
  t = (t & 0xffff) + (t >> 16);
  return static_cast<uint32_t>(t);
}

FlowKey FlowKey::reversed() const {
  FlowKey r = *this;
  std::memcpy(r.local_ip, remote_ip, 16);
  std::memcpy(r.remote_ip, local_ip, 16);
  r.local_port = remote_port;
  r.remote_port = local_port;
  return r;
}

uint16_t pseudoHeaderSum(const uint8_t* src, const uint8_t* dst, bool v6, uint32_t tcp_len) {
  uint32_t sum = pseudoSum(src, dst, v6, tcp_len);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

FrameKind parseFrame(const uint8_t* f, size_t len, bool verify, Segment& seg, DropReason& why) {
  return parseFrame(f, len, verify, verify, seg, why);
}

FrameKind parseFrame(const uint8_t* f, size_t len, bool verify_ip, bool verify_tcp, Segment& seg,
                     DropReason& why) {
  if (len < kEthHeader) {
    why = DropReason::kTooShort;
    return FrameKind::kDropped;
  }
  std::memcpy(seg.dst_mac, f, 6);
  std::memcpy(seg.src_mac, f + 6, 6);
  const uint16_t ether = rd16(f + 12);
  const uint8_t* ip = f + kEthHeader;
  const size_t iplen_avail = len - kEthHeader;
  const uint8_t* tcp;
  size_t tcp_len;
  FlowKey& k = seg.key;
  k = FlowKey{};
  if (ether == kEtherIpv4) {
    if (iplen_avail < 20 || (ip[0] >> 4) != 4) {
      why = DropReason::kBadIpHeader;
      return FrameKind::kDropped;
    }
    const size_t ihl = static_cast<size_t>(ip[0] & 0xf) * 4;
    const size_t total = rd16(ip + 2);
    if (ihl < 20 || total < ihl || total > iplen_avail) {
      why = total > iplen_avail ? DropReason::kTooShort : DropReason::kBadIpHeader;
      return FrameKind::kDropped;
    }
    if (verify_ip && ig_csum_fold(checksumPartial(ip, ihl, 0)) != 0) {
      why = DropReason::kBadIpChecksum;
      return FrameKind::kDropped;
    }
    if ((rd16(ip + 6) & 0x3fff) != 0) {  // MF or fragment offset
      why = DropReason::kFragment;
      return FrameKind::kDropped;
    }
    const uint8_t proto = ip[9];
    if (proto == 1) return FrameKind::kIcmp;
    if (proto != 6) return FrameKind::kOtherIp;
    std::memcpy(k.remote_ip, ip + 12, 4);
    std::memcpy(k.local_ip, ip + 16, 4);
    seg.ttl = ip[8];
    tcp = ip + ihl;  // IPv4 options skipped
    tcp_len = total - ihl;
  } else if (ether == kEtherIpv6) {
    if (iplen_avail < 40 || (ip[0] >> 4) != 6) {
      why = DropReason::kBadIpHeader;
      return FrameKind::kDropped;
    }
    const size_t plen = rd16(ip + 4);
    if (40 + plen > iplen_avail) {
      why = DropReason::kTooShort;
      return FrameKind::kDropped;
    }
    const uint8_t nh = ip[6];
    if (nh == 58) return FrameKind::kIcmp;  // ICMPv6 (ND, ping): the kernel's
    if (nh != 6) {
      // Hop-by-hop, routing, fragment, destination options...: not supported, dropped.
      if (nh == 0 || nh == 43 || nh == 44 || nh == 60 || nh == 51 || nh == 50 || nh == 135) {
        why = DropReason::kIpv6ExtHeader;
        return FrameKind::kDropped;
      }
      return FrameKind::kOtherIp;
    }
    k.v6 = 1;
    std::memcpy(k.remote_ip, ip + 8, 16);
    std::memcpy(k.local_ip, ip + 24, 16);
    seg.ttl = ip[7];
    tcp = ip + 40;
    tcp_len = plen;
  } else if (ether == kEtherArp) {
    return FrameKind::kArp;
  } else {
    why = DropReason::kNotIp;
    return FrameKind::kDropped;
  }
  if (tcp_len < 20) {
    why = DropReason::kBadTcpHeader;
    return FrameKind::kDropped;
  }
  const size_t doff = static_cast<size_t>(tcp[12] >> 4) * 4;
  if (doff < 20 || doff > tcp_len) {
    why = DropReason::kBadTcpHeader;
    return FrameKind::kDropped;
  }
  if (verify_tcp) {
    const uint8_t* src = k.v6 ? ip + 8 : ip + 12;
    const uint8_t* dst = k.v6 ? ip + 24 : ip + 16;
    uint32_t sum = pseudoSum(src, dst, k.v6, static_cast<uint32_t>(tcp_len));
    sum = checksumPartial(tcp, tcp_len, sum);
    if (ig_csum_fold(sum) != 0) {
      why = DropReason::kBadTcpChecksum;
      return FrameKind::kDropped;
    }
  }
  k.remote_port = rd16(tcp);
  k.local_port = rd16(tcp + 2);
  seg.seq = rd32(tcp + 4);
  seg.ack = rd32(tcp + 8);
  seg.flags = tcp[13];
  seg.window = rd16(tcp + 14);
  seg.opt = TcpOptionValues{};
  if (doff > 20 && !parseOptions(tcp + 20, doff - 20, seg.opt)) {
    why = DropReason::kBadTcpHeader;
    return FrameKind::kDropped;
  }
  seg.payload = tcp + doff;
  seg.payload_len = static_cast<uint32_t>(tcp_len - doff);
  return FrameKind::kTcp;
}

namespace {
size_t optionsLength(const SegmentSpec& s) {
  size_t n = 0;
  if (s.mss) n += 4;
  if (s.has_ts) n += 12;                     // [SACKOK|NOP NOP] TS
  else if (s.sack_permitted) n += 4;         // NOP NOP SACKOK
  if (s.wscale >= 0) n += 4;                 // NOP WS
  if (s.num_sack) n += 4 + 8 * static_cast<size_t>(s.num_sack);  // NOP NOP SACK
  return n;
}
}  // namespace

size_t headerLength(const SegmentSpec& s) {
  return kEthHeader + (s.key->v6 ? 40 : 20) + 20 + optionsLength(s);
}

size_t writeHeaders(uint8_t* buf, const SegmentSpec& s, uint32_t payload_len) {
  const FlowKey& k = *s.key;
  std::memcpy(buf, s.dst_mac, 6);
  std::memcpy(buf + 6, s.src_mac, 6);
  const size_t opt_len = optionsLength(s);
  const size_t tcp_hlen = 20 + opt_len;
  uint8_t* ip = buf + kEthHeader;
  uint8_t* tcp;
  if (!k.v6) {
    wr16(buf + 12, kEtherIpv4);
    ip[0] = 0x45;
    ip[1] = 0;
    wr16(ip + 2, static_cast<uint16_t>(20 + tcp_hlen + payload_len));
    wr16(ip + 4, 0);       // ID: unused with DF
    wr16(ip + 6, 0x4000);  // DF
    ip[8] = s.ttl;
    ip[9] = 6;
    wr16(ip + 10, 0);
    std::memcpy(ip + 12, k.local_ip, 4);
    std::memcpy(ip + 16, k.remote_ip, 4);
    wr16(ip + 10, ig_csum_fold(checksumPartial(ip, 20, 0)));
    tcp = ip + 20;
  } else {
    wr16(buf + 12, kEtherIpv6);
    wr32(ip, 0x60000000u);
    wr16(ip + 4, static_cast<uint16_t>(tcp_hlen + payload_len));
    ip[6] = 6;
    ip[7] = s.ttl;
    std::memcpy(ip + 8, k.local_ip, 16);
    std::memcpy(ip + 24, k.remote_ip, 16);
    tcp = ip + 40;
  }
  wr16(tcp, k.local_port);
  wr16(tcp + 2, k.remote_port);
  wr32(tcp + 4, s.seq);
  wr32(tcp + 8, s.ack);
  tcp[12] = static_cast<uint8_t>((tcp_hlen / 4) << 4);
  tcp[13] = s.flags;
  wr16(tcp + 14, s.window);
  wr16(tcp + 16, 0);
  wr16(tcp + 18, 0);
  uint8_t* o = tcp + 20;
  if (s.mss) {
    o[0] = 2;
    o[1] = 4;
    wr16(o + 2, s.mss);
    o += 4;
  }
  if (s.has_ts) {
    if (s.sack_permitted) {
      o[0] = 4;
      o[1] = 2;
    } else {
      o[0] = 1;
      o[1] = 1;
    }
    o[2] = 8;
    o[3] = 10;
    wr32(o + 4, s.ts_val);
    wr32(o + 8, s.ts_ecr);
    o += 12;
  } else if (s.sack_permitted) {
    o[0] = 1;
    o[1] = 1;
    o[2] = 4;
    o[3] = 2;
    o += 4;
  }
  if (s.wscale >= 0) {
    o[0] = 1;
    o[1] = 3;
    o[2] = 3;
    o[3] = static_cast<uint8_t>(s.wscale);
    o += 4;
  }
  if (s.num_sack) {
    o[0] = 1;
    o[1] = 1;
    o[2] = 5;
    o[3] = static_cast<uint8_t>(2 + 8 * s.num_sack);
    o += 4;
    for (int b = 0; b < s.num_sack; ++b) {
      wr32(o, s.sack[b][0]);
      wr32(o + 4, s.sack[b][1]);
      o += 8;
    }
  }
  return static_cast<size_t>(o - buf);
}

void finishSegment(uint8_t* buf, size_t header_len, uint32_t payload_len, bool v6,
                   TxChecksum mode) {
  uint8_t* ip = buf + kEthHeader;
  uint8_t* tcp = ip + (v6 ? 40 : 20);
  const uint32_t tcp_len = static_cast<uint32_t>(header_len - (tcp - buf)) + payload_len;
  const uint8_t* src = v6 ? ip + 8 : ip + 12;
  const uint8_t* dst = v6 ? ip + 24 : ip + 16;
  if (mode == TxChecksum::kOffload) {
    // The NIC sums the TCP header and payload onto this, and computes the IPv4 header's.
    if (!v6) wr16(ip + 10, 0);
    wr16(tcp + 16, pseudoHeaderSum(src, dst, v6, tcp_len));
    return;
  }
  wr16(tcp + 16, 0);
  uint32_t sum = pseudoSum(src, dst, v6, tcp_len);
  sum = checksumPartial(tcp, tcp_len, sum);
  wr16(tcp + 16, ig_csum_fold(sum));
}

size_t buildSegment(uint8_t* buf, size_t cap, const SegmentSpec& spec, const uint8_t* payload,
                    uint32_t payload_len, TxChecksum mode) {
  const size_t h = headerLength(spec);
  if (h + payload_len > cap) return 0;
  writeHeaders(buf, spec, payload_len);
  if (payload_len) std::memcpy(buf + h, payload, payload_len);
  finishSegment(buf, h, payload_len, spec.key->v6, mode);
  return h + payload_len;
}

std::string_view dropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kTooShort: return "too_short";
    case DropReason::kNotIp: return "not_ip";
    case DropReason::kBadIpHeader: return "bad_ip_header";
    case DropReason::kBadIpChecksum: return "bad_ip_checksum";
    case DropReason::kFragment: return "fragment";
    case DropReason::kIpv6ExtHeader: return "ipv6_ext_header";
    case DropReason::kBadTcpHeader: return "bad_tcp_header";
    case DropReason::kBadTcpChecksum: return "bad_tcp_checksum";
    case DropReason::kNoListener: return "no_listener";
    case DropReason::kNoConnection: return "no_connection";
    case DropReason::kSynQueueFull: return "syn_queue_full";
    case DropReason::kConnLimit: return "conn_limit";
    case DropReason::kOutOfWindow: return "out_of_window";
    case DropReason::kPaws: return "paws";
    case DropReason::kBadAck: return "bad_ack";
    case DropReason::kOooLimit: return "ooo_limit";
    case DropReason::kBeyondWindow: return "beyond_window";
    case DropReason::kTxNoFrame: return "tx_no_frame";
    case DropReason::kInvalidFlags: return "invalid_flags";
    case DropReason::kMissingTimestamp: return "missing_timestamp";
    case DropReason::kBadCookie: return "bad_cookie";
    case DropReason::kCount: break;
  }
  return "unknown";
}

std::string_view stateName(TcpState s) {
  switch (s) {
    case TcpState::kClosed: return "closed";
    case TcpState::kSynReceived: return "syn_received";
    case TcpState::kEstablished: return "established";
    case TcpState::kCloseWait: return "close_wait";
    case TcpState::kLastAck: return "last_ack";
    case TcpState::kFinWait1: return "fin_wait1";
    case TcpState::kFinWait2: return "fin_wait2";
    case TcpState::kClosing: return "closing";
    case TcpState::kTimeWait: return "time_wait";
    case TcpState::kCount: break;
  }
  return "unknown";
}

}  // namespace infergate::dataplane::tcp
