#pragma once
// The ingress tag a frame carries in Frame::meta (afxdp mode): the XDP program writes a
// struct ig_tag (xdp/ingress_shared.h) in front of the frame, the AF_XDP device packs it into
// Frame::meta (dataplane/xsk/xsk_device.h, encodeTag) and the TCP stack keeps, per
// connection, the tag of the segment that started the current request
// (net::Transport::ingressTag()). Packing: bit 32 set when a valid tag was present;
// byte 0 priority class, byte 1 verdict, byte 2 flags, byte 3 reason. The values mirror
// enum ig_tag_verdict / ig_tag_flags (static_asserts in dataplane/xsk/xsk_device.cc).

#include <cstdint>

#include "net/ingress_tag.h"

namespace infergate::dataplane::tcp {

inline constexpr uint64_t kMetaValid = 1ull << 32;
// The verdict byte holds net::IngressTag::Verdict's values (= enum ig_tag_verdict).
inline constexpr uint8_t kVerdictAdmit = static_cast<uint8_t>(net::IngressTag::Verdict::kAdmit);
inline constexpr uint8_t kVerdictRateLimited =
    static_cast<uint8_t>(net::IngressTag::Verdict::kRateLimited);  // answer 429, no work
inline constexpr uint8_t kVerdictOverload =
    static_cast<uint8_t>(net::IngressTag::Verdict::kOverload);     // answer 503, no work
inline constexpr uint8_t kTagRequestStart = 1;     // IG_TF_REQUEST_START
// The program rejected this flow (it answered, or asks the stack to answer, with a RST): the
// stack resets and frees the connection at once. IG_TF_REJECTED in the program (see
// docs/AFXDP.md, "Rejected flows").
inline constexpr uint8_t kTagRejected = 8;

inline bool metaValid(uint64_t meta) { return (meta & kMetaValid) != 0; }
inline uint8_t metaClass(uint64_t meta) { return static_cast<uint8_t>(meta); }
inline uint8_t metaVerdict(uint64_t meta) { return static_cast<uint8_t>(meta >> 8); }
inline uint8_t metaFlags(uint64_t meta) { return static_cast<uint8_t>(meta >> 16); }
inline uint8_t metaReason(uint64_t meta) { return static_cast<uint8_t>(meta >> 24); }
inline uint64_t makeMeta(uint8_t cls, uint8_t verdict, uint8_t flags, uint8_t reason = 0) {
  return kMetaValid | cls | (uint64_t{verdict} << 8) | (uint64_t{flags} << 16) |
         (uint64_t{reason} << 24);
}

}  // namespace infergate::dataplane::tcp
