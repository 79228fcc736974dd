// tensor_json::toCharsShortest writes exactly what std::to_chars(float) writes (the JSON float
// format of the KServe REST responses), on representative values and a spread of every float
// bit pattern; IG_FLOAT_FORMAT_EXHAUSTIVE=1 checks all 2^32 patterns (minutes).
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "frontend/tensor_json.h"

namespace infergate::frontend::tensor_json {
namespace {

std::string reference(float v) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string fast(float v) {
  char buf[64];
  std::memset(buf, 'X', sizeof buf);
  char* end = toCharsShortest(buf, v);
  EXPECT_LE(end - buf, 32);
  return std::string(buf, end);
}

float fromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Checks the patterns lo, lo+stride, ... below hi; returns the number of mismatches (the first
// few are reported).
uint64_t checkRange(uint64_t lo, uint64_t hi, uint64_t stride) {
  uint64_t bad = 0;
  for (uint64_t b = lo; b < hi; b += stride) {
    const float v = fromBits(static_cast<uint32_t>(b));
    if (std::isnan(v)) continue;
    char want[64], got[64];
    const char* we = std::to_chars(want, want + sizeof want, v).ptr;
    const char* ge = toCharsShortest(got, v);
    if (std::string_view(want, we - want) != std::string_view(got, ge - got)) {
      if (++bad <= 10) {
        ADD_FAILURE() << "bits 0x" << std::hex << b << ": to_chars '"
                      << std::string_view(want, we - want) << "', toCharsShortest '"
                      << std::string_view(got, ge - got) << "'";
      }
    }
  }
  return bad;
}

TEST(FloatFormat, RepresentativeValues) {
  const float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, 16.0f, 10.0f, 20.0f, 100.0f, 1000.0f,
                          10000.0f, 12000.0f, 99999.0f, 100000.0f, 123456.0f, 1e6f, 1.5e6f,
                          16777215.0f, 16777216.0f, 16777218.0f, 123456792.0f, 1e10f, 3e38f,
                          0.1f, 0.5f, 0.25f, 0.2f, 0.3f, 1.1f, 3.14159265f, -2.5f, 1e-3f, 1e-4f,
                          1.5e-4f, 1e-5f, 1.234e-5f, 0.000123f, 1e-10f, 1e-38f, 1e-40f, 1e-45f,
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::lowest(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::epsilon(), 0.333333343f, 2.71828175f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  for (float v : values) {
    EXPECT_EQ(fast(v), reference(v)) << "value " << reference(v);
    EXPECT_EQ(fast(-v), reference(-v)) << "value " << reference(-v);
  }
  // Spot checks of the format itself.
  EXPECT_EQ(fast(16.0f), "16");
  EXPECT_EQ(fast(1e6f), "1e+06");
  EXPECT_EQ(fast(0.1f), "0.1");
  EXPECT_EQ(fast(1e-5f), "1e-05");
}

TEST(FloatFormat, IntegersUpTo2To24) {
  // Every integer up to 2^20, then every 7th up to just past 2^24 (the fixed form's limit).
  uint64_t bad = 0;
  for (int32_t i = 0; i <= (1 << 24) + 64; i += i < (1 << 20) ? 1 : 7) {
    for (const float v : {static_cast<float>(i), -static_cast<float>(i)}) {
      char want[64], got[64];
      const std::string_view w(want, std::to_chars(want, want + sizeof want, v).ptr - want);
      const std::string_view g(got, toCharsShortest(got, v) - got);
      if (w != g && ++bad <= 10) ADD_FAILURE() << "integer " << i << ": " << w << " vs " << g;
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(FloatFormat, SpreadOfAllBitPatterns) {
  // A stride coprime with 2^32 visits every exponent and many significands of both signs.
  EXPECT_EQ(checkRange(0, uint64_t{1} << 32, 4093), 0u);
  // Every pattern of a few binades where the fixed/scientific choice switches.
  for (float lo : {1e-5f, 1e-4f, 0.1f, 1e4f, 1e5f, 1e7f}) {
    uint32_t b;
    std::memcpy(&b, &lo, 4);
    EXPECT_EQ(checkRange(b & 0xFF800000u, (b & 0xFF800000u) + (1u << 23), 7), 0u);
  }
}

TEST(FloatFormat, ExhaustiveWhenAsked) {
  const char* env = std::getenv("IG_FLOAT_FORMAT_EXHAUSTIVE");
  if (env == nullptr || std::string_view(env) != "1") {
    GTEST_SKIP() << "set IG_FLOAT_FORMAT_EXHAUSTIVE=1 to check all 2^32 floats (minutes)";
  }
  EXPECT_EQ(checkRange(0, uint64_t{1} << 32, 1), 0u);
}

}  // namespace
}  // namespace infergate::frontend::tensor_json
