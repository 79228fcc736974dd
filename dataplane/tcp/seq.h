#pragma once
// TCP sequence-number arithmetic, modulo 2^32 (RFC 9293 §3.4): a < b means b is ahead of a by
// less than 2^31. Every comparison of sequence numbers, acknowledgements and timestamps in the
// stack goes through these.

#include <cstdint>

namespace infergate::dataplane::tcp {

constexpr bool seqLt(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
constexpr bool seqLeq(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }
constexpr bool seqGt(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }
constexpr bool seqGeq(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }
constexpr uint32_t seqMax(uint32_t a, uint32_t b) { return seqGt(a, b) ? a : b; }
constexpr uint32_t seqMin(uint32_t a, uint32_t b) { return seqLt(a, b) ? a : b; }
// a <= s < a + len
constexpr bool seqInRange(uint32_t s, uint32_t a, uint32_t len) { return s - a < len; }

}  // namespace infergate::dataplane::tcp
