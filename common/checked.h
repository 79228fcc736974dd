#pragma once
// Checked arithmetic for sizes that come from the wire (shapes, lengths, timeouts): every
// product or sum of client-controlled numbers goes through these, never a bare * or +.

#include <cstdint>
#include <limits>
#include <optional>

namespace infergate::common {

// a * b into out; false (out unspecified) when it does not fit.
template <typename T>
[[nodiscard]] constexpr bool checkedMul(T a, T b, T& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

// a + b into out; false when it does not fit.
template <typename T>
[[nodiscard]] constexpr bool checkedAdd(T a, T b, T& out) {
  return !__builtin_add_overflow(a, b, &out);
}

// a * b + c, or nullopt when any step overflows.
constexpr std::optional<uint64_t> mulAdd(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t p = 0, s = 0;
  if (!checkedMul(a, b, p) || !checkedAdd(p, c, s)) return std::nullopt;
  return s;
}

// a + b, or the type's maximum when it overflows (deadlines: "later than anything").
constexpr uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  uint64_t s = 0;
  return checkedAdd(a, b, s) ? s : std::numeric_limits<uint64_t>::max();
}

// a * b, or the type's maximum when it overflows.
constexpr uint64_t saturatingMul(uint64_t a, uint64_t b) {
  uint64_t p = 0;
  return checkedMul(a, b, p) ? p : std::numeric_limits<uint64_t>::max();
}

}  // namespace infergate::common
