#pragma once
// The XDP program's configuration (struct ig_config) for the fuzz targets that run its rules:
// fuzz_xdp_classifier (xdp/classifier.h alone) and fuzz_ingress_filter (dpdk mode's
// FilteringDevice, the same rules in userspace). It mirrors xdp/testing/fixtures.cc's
// fixtureOptions() through xdp::buildConfig(), with knobs; built by hand because the fuzz build
// has no libbpf (ig_xdp).
#include <arpa/inet.h>

#include <cstdint>
#include <cstring>

#include "xdp/ingress_shared.h"

namespace infergate::fuzz {

inline uint64_t methodKey(const char* m) {
  uint64_t k = 0;
  for (size_t i = 0; m[i] && i < 8; ++i)
    k |= static_cast<uint64_t>(static_cast<uint8_t>(m[i])) << (8 * i);
  return k;
}

// As xdp_filter.cc's fillPrefix().
inline void addPrefix(ig_config* c, const char* s, bool allow, uint8_t cls) {
  ig_prefix* p = &c->prefix[c->nprefixes++];
  std::memset(p, 0, sizeof(*p));
  const size_t n = std::strlen(s);
  for (size_t i = 0; i < n && i < IG_PREFIX_MAX_LEN; ++i) {
    p->word[i / 8] |= static_cast<uint64_t>(static_cast<uint8_t>(s[i])) << (8 * (i % 8));
    p->mask[i / 8] |= 0xffULL << (8 * (i % 8));
  }
  p->len = static_cast<uint8_t>(n);
  p->allow = allow ? 1 : 0;
  p->cls = cls;
}

// k0: bit 0 send_rst, 1 priority_header, 2 reject_mid_stream, 3-4 frag_policy, 6 h2_max_frame
// 16384 (else 16 MiB - 1), 7 extra methods/prefixes; k1: bits 0-3 synack_wscale (capped at 14),
// 5 no allow prefixes (class rules only), 6-7 synack_mss. Every feature the program has is on
// (afxdp with SYN cookies); no rate limits, no CIDR rules.
inline ig_config makeConfig(uint8_t k0, uint8_t k1) {
  ig_config c;
  std::memset(&c, 0, sizeof(c));
  c.ports[c.nports++] = htons(8000);
  c.ports[c.nports++] = htons(8001);
  c.method_key[c.nmethods++] = methodKey("GET");
  c.method_key[c.nmethods++] = methodKey("POST");
  if (k0 & 0x80) {
    c.method_key[c.nmethods++] = methodKey("PUT");
    c.method_key[c.nmethods++] = methodKey("PROPFIND");  // 8 letters: the longest token
  }
  addPrefix(&c, "/v2/models/urgent", false, 0);
  if (k0 & 0x80) addPrefix(&c, "/v2/models/background-batch-jobs", false, 3);  // 32 bytes
  if (!(k1 & 0x20)) {
    addPrefix(&c, "/v2/", true, IG_CLASS_NONE);
    addPrefix(&c, "/v1/models/", true, IG_CLASS_NONE);
    addPrefix(&c, "/metrics", true, IG_CLASS_NONE);
  }
  c.h2_max_frame = (k0 & 0x40) ? 16384 : 16777215;
  c.default_cls = 1;
  c.send_rst = k0 & 1;
  c.priority_header = (k0 >> 1) & 1;
  c.reject_mid_stream = (k0 >> 2) & 1;
  c.frag_policy = static_cast<uint8_t>(((k0 >> 3) & 3) % 3);
  // Every feature the program has, on (afxdp with SYN cookies): the most code reachable.
  c.tag_mode = c.track_flows = c.redirect_xsk = c.syn_cookies = c.prove_handshake = 1;
  c.flow_mask = 1023;
  c.reject_ttl_ns = 1'000'000'000;
  c.src_mask4 = 0xffffffffu;
  c.src_mask6[0] = c.src_mask6[1] = 0xffffffffu;
  static const uint16_t kMss[4] = {1460, 536, 8960, 65495};
  c.synack_mss = kMss[k1 >> 6];
  c.synack_wscale = static_cast<uint8_t>((k1 & 0xf) > 14 ? 14 : (k1 & 0xf));
  return c;
}

}  // namespace infergate::fuzz
