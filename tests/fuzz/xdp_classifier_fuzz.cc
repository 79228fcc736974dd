// libFuzzer target: the XDP classifier (xdp/classifier.h) compiled for the host, over arbitrary
// frames, the way ingress.bpf.c calls it, plus the SYN-cookie code (dataplane/tcp/syncookie.h)
// and the in-place RST / SYN-ACK builders. The HTTP stages are also checked against their
// pre-issue-15 form (tests/unit/xdp/classifier_ref.h): the same fields, byte for byte.
//
// Input: [knobs0][knobs1][frame...]
//   knobs0: bit 0 send_rst, 1 priority_header, 2 reject_mid_stream, 3-4 frag_policy,
//           5 known_first, 6 h2_max_frame 16384 (else 16 MiB - 1), 7 extra methods/prefixes
//   knobs1: bits 0-3 synack_wscale (capped at 14), 4 cookie key generation, 5 no allow
//           prefixes (class rules only), 6-7 synack_mss (1460, 536, 8960, 65495)
//
// Each function gets the frame in a heap buffer of exactly its size (ASan sees any access
// past data_end); the builders get a copy sized as the program's frame is when it calls them
// (the received frame for the RST, the frame grown to the SYN-ACK's length for the SYN-ACK)
// and, for the SYN-ACK, also the ungrown frame (it must refuse, not write past `end`). What
// the builders produce must parse, checksums included, with the TCP stack's own parser.
#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dataplane/tcp/packet.h"
#include "dataplane/tcp/syncookie.h"
#include "tests/fuzz/xdp_fuzz_config.h"
#include "tests/unit/xdp/classifier_ref.h"
#include "xdp/classifier.h"

namespace {

namespace tcp = infergate::dataplane::tcp;
using infergate::fuzz::makeConfig;

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fuzz_xdp_classifier: invariant failed at %s:%d: %s\n", __FILE__, \
                   __LINE__, #cond);                                                         \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

ig_cookie_keys cookieKeys(uint8_t k1) {
  ig_cookie_keys k{};
  k.key[0] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  k.key[1] = {0x1716151413121110ull, 0x1f1e1d1c1b1a1918ull};
  k.gen = (k1 >> 4) & 1;
  return k;
}

std::unique_ptr<uint8_t[]> copyOf(const uint8_t* p, size_t have, size_t size) {
  std::unique_ptr<uint8_t[]> b(new uint8_t[size]);
  std::memset(b.get(), 0xa5, size);  // what a grown XDP frame holds is unspecified
  std::memcpy(b.get(), p, have < size ? have : size);
  return b;
}

// A frame the builders made, checked with the TCP stack's parser (checksums verified).
void checkReply(const uint8_t* f, size_t len, const ig_parse& p, uint8_t flags, tcp::Segment* seg) {
  tcp::DropReason why{};
  FUZZ_CHECK(tcp::parseFrame(f, len, true, *seg, why) == tcp::FrameKind::kTcp);
  FUZZ_CHECK(seg->flags == flags);
  FUZZ_CHECK(seg->key.remote_port == ntohs(p.key.dport));
  FUZZ_CHECK(seg->key.local_port == ntohs(p.key.sport));
  FUZZ_CHECK(seg->key.v6 == (p.key.family == 6));
  FUZZ_CHECK(std::memcmp(seg->src_mac, f + 6, 6) == 0);
}

void fuzzSegment(const uint8_t* f, size_t n, const ig_config& cfg, uint8_t k0, ig_parse p) {
  const uint8_t* end = f + n;
  if (p.pl_len) {
    // issue 15: the optimised stages answer exactly what the pre-issue-15 stages answered
    ig_parse r = p;
    infergate::xdp::ref::ref_classify_payload(f, end, &cfg, &r, (k0 >> 5) & 1);
    ig_classify_payload(f, end, &cfg, &p, (k0 >> 5) & 1);
    FUZZ_CHECK(std::memcmp(&p, &r, sizeof(p)) == 0);
    FUZZ_CHECK(p.action == XDP_PASS || p.action == XDP_DROP || p.action == XDP_TX);
    FUZZ_CHECK(p.action != XDP_TX || cfg.send_rst);
    FUZZ_CHECK(p.reason < IG_R_MAX);
    FUZZ_CHECK(p.cls == IG_CLASS_NONE || p.cls < IG_NUM_CLASSES);
    if (p.t_len) FUZZ_CHECK(p.t_off + p.t_len <= p.pl_off + p.pl_len);
    if (p.hdr_len) FUZZ_CHECK(p.hdr_off + p.hdr_len <= p.pl_off + p.pl_len);
  }
  // The RST builder on a copy exactly as long as the received frame (the program shrinks it
  // afterwards). Every parsed service segment has room for the reply.
  auto buf = copyOf(f, n, n);
  const int len = ig_build_rst(buf.get(), buf.get() + n, &p);
  FUZZ_CHECK(len > 0 && static_cast<size_t>(len) <= n);
  if (!p.vlan) {  // the stack's parser takes no VLAN tags
    tcp::Segment seg;
    checkReply(buf.get(), static_cast<size_t>(len), p, IG_TCP_RST | IG_TCP_ACK, &seg);
    FUZZ_CHECK(seg.seq == ((p.tcp_flags & IG_TCP_ACK) ? p.ack_seq : 0));
    FUZZ_CHECK(seg.payload_len == 0);
  }
}

void fuzzSyn(const uint8_t* f, size_t n, const ig_config& cfg, uint8_t k1, const ig_parse& p) {
  const uint8_t* end = f + n;
  ig_syn_opts o;
  ig_parse_syn_opts(f, end, &p, &o);
  FUZZ_CHECK(o.wscale >= -1 && o.wscale <= 14);
  FUZZ_CHECK(o.sack <= 1 && o.ts <= 1);

  // The cookie the program would answer with must validate, and decode what was encoded.
  const ig_cookie_keys keys = cookieKeys(k1);
  const int v6 = p.key.family == 6;
  const __u32 opts = ig_cookie_encode_opts(o.mss ? o.mss : 536, o.wscale, o.sack, o.ts);
  const __u32 isn =
      ig_cookie_make(&keys, p.key.saddr, p.key.daddr, p.key.sport, p.key.dport, v6, p.seq, opts);
  ig_cookie_opts co{};
  FUZZ_CHECK(ig_cookie_check(&keys, p.key.saddr, p.key.daddr, p.key.sport, p.key.dport, v6, p.seq,
                             isn, &co) == 1);
  FUZZ_CHECK(co.mss == ig_cookie_mss[opts & 3]);
  FUZZ_CHECK(co.wscale == (o.wscale < 0 ? -1 : o.wscale));
  FUZZ_CHECK(co.sack == o.sack && co.ts == o.ts);
  // Another client ISN, or another key generation, must not validate the same cookie bits
  // except by a 2^-23 chance; not asserted (it would fail, rarely, on a legitimate input).

  // The SYN-ACK, in a frame grown (or shrunk) to exactly its length, as bpf_xdp_adjust_tail
  // leaves it.
  const size_t len = (p.vlan ? 18u : 14u) + (v6 ? 40u : 20u) + ig_synack_tcp_len(&o);
  const uint16_t mss = static_cast<uint16_t>(cfg.synack_mss - (v6 ? 20 : 0));
  const uint32_t tsval = 0x12345678u + isn;
  auto buf = copyOf(f, n, len);
  const int r =
      ig_build_synack(buf.get(), buf.get() + len, &p, &o, isn, tsval, mss, cfg.synack_wscale);
  FUZZ_CHECK(r == static_cast<int>(len));
  if (!p.vlan) {
    tcp::Segment seg;
    checkReply(buf.get(), len, p, IG_TCP_SYN | IG_TCP_ACK, &seg);
    FUZZ_CHECK(seg.seq == isn && seg.ack == p.seq + 1);
    FUZZ_CHECK(seg.opt.has_mss && seg.opt.mss == mss);
    FUZZ_CHECK(seg.opt.sack_permitted == (o.sack != 0));
    FUZZ_CHECK(seg.opt.has_ts == (o.ts != 0));
    if (o.ts) FUZZ_CHECK(seg.opt.ts_val == tsval && seg.opt.ts_ecr == o.tsval);
    FUZZ_CHECK((seg.opt.wscale >= 0) == (o.wscale >= 0));
    if (o.wscale >= 0) FUZZ_CHECK(seg.opt.wscale == cfg.synack_wscale);
  }
  // The same, in the frame as received: it must fit or be refused, never overflow.
  auto same = copyOf(f, n, n);
  const int r2 =
      ig_build_synack(same.get(), same.get() + n, &p, &o, isn, tsval, mss, cfg.synack_wscale);
  FUZZ_CHECK(r2 == (len <= n ? static_cast<int>(len) : -1));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t k0 = data[0], k1 = data[1];
  const ig_config cfg = makeConfig(k0, k1);
  const size_t n = size - 2;
  auto frame = copyOf(data + 2, n, n);  // exactly n bytes: data_end
  const uint8_t* f = frame.get();
  const uint8_t* end = f + n;

  ig_parse p{};
  const int more = ig_parse_l2l4(f, end, &cfg, &p);
  FUZZ_CHECK(p.reason < IG_R_MAX);
  FUZZ_CHECK(p.action == XDP_PASS || p.action == XDP_DROP);
  if (!more) return 0;
  FUZZ_CHECK(p.service == 1 && p.action == XDP_PASS);
  FUZZ_CHECK(p.reason == IG_R_SYN || p.reason == IG_R_SEGMENT);
  FUZZ_CHECK(p.l4_off >= p.l3_off + 20u && p.pl_off >= p.l4_off + 20u);
  FUZZ_CHECK(static_cast<size_t>(p.pl_off) + p.pl_len <= n);

  if (p.reason == IG_R_SYN) {
    fuzzSyn(f, n, cfg, k1, p);
  } else {
    // Arbitrary ACKs against the cookie check (the program's ig_cookie_valid_sub).
    const ig_cookie_keys keys = cookieKeys(k1);
    ig_cookie_opts co{};
    if (ig_cookie_check(&keys, p.key.saddr, p.key.daddr, p.key.sport, p.key.dport,
                        p.key.family == 6, p.seq - 1, p.ack_seq - 1, &co)) {
      FUZZ_CHECK(co.wscale >= -1 && co.wscale <= 14);
    }
    fuzzSegment(f, n, cfg, k0, p);
  }
  return 0;
}
