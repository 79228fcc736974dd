#include "frontend/tensor_json.h"

#include <charconv>
#include <cmath>

#include "fmt/format.h"

namespace infergate::frontend::tensor_json {

ValueError readNumber(element e, double& out) {
  switch (e.type()) {
    case element_type::DOUBLE:
      return e.get_double().get(out) ? ValueError::kWrongType : ValueError::kOk;
    case element_type::INT64: {
      int64_t v = 0;
      if (e.get_int64().get(v)) return ValueError::kWrongType;
      out = static_cast<double>(v);
      return ValueError::kOk;
    }
    case element_type::UINT64: {
      uint64_t v = 0;
      if (e.get_uint64().get(v)) return ValueError::kWrongType;
      out = static_cast<double>(v);
      return ValueError::kOk;
    }
    case element_type::ARRAY: return ValueError::kNesting;
    default: return ValueError::kWrongType;
  }
}

ValueError readBool(element e, bool& out) {
  switch (e.type()) {
    case element_type::BOOL: return e.get_bool().get(out) ? ValueError::kWrongType : ValueError::kOk;
    case element_type::ARRAY: return ValueError::kNesting;
    default: return ValueError::kWrongType;
  }
}

namespace {

constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

int decimalDigits(uint32_t v) {  // Dragonbox gives at most 9 digits for a float
  if (v < 10) return 1;
  if (v < 100) return 2;
  if (v < 1000) return 3;
  if (v < 10000) return 4;
  if (v < 100000) return 5;
  if (v < 1000000) return 6;
  if (v < 10000000) return 7;
  if (v < 100000000) return 8;
  if (v < 1000000000) return 9;
  return 10;
}

// `n` ASCII zeros at `p` (few: no library call).
void writeZeros(char* p, int n) {
  for (int i = 0; i < n; ++i) p[i] = '0';
}

// Writes the n decimal digits of v ending at `end`.
void writeDigitsBackwards(char* end, uint32_t v) {
  while (v >= 100) {
    const uint32_t r = v % 100;
    v /= 100;
    end -= 2;
    std::memcpy(end, kDigitPairs + 2 * r, 2);
  }
  if (v >= 10) {
    end -= 2;
    std::memcpy(end, kDigitPairs + 2 * v, 2);
  } else {
    *--end = static_cast<char>('0' + v);
  }
}

}  // namespace

char* toCharsShortest(char* p, float v) {
  if (!std::isfinite(v) || v == 0) return std::to_chars(p, p + 32, v).ptr;
  char* const start = p;
  const float orig = v;
  if (std::signbit(v)) {
    *p++ = '-';
    v = -v;
  }
  // v = sig x 10^exp, sig the shortest digits that read back as v (no trailing zeros).
  const auto dec = fmt::detail::dragonbox::to_decimal(v);
  const uint32_t sig = dec.significand;
  const int exp = dec.exponent;
  const int n = decimalDigits(sig);
  const int sci_exp = exp + n - 1;
  const int abs_sci = sci_exp < 0 ? -sci_exp : sci_exp;
  const int sci_len = n + (n > 1 ? 1 : 0) + 2 + (abs_sci >= 100 ? 3 : 2);
  const int fixed_len = exp >= 0 ? n + exp : (n + exp > 0 ? n + 1 : 2 - exp);
  if (fixed_len <= sci_len) {
    if (exp >= 0) {
      // Integer: sig then zeros is v's exact value only below 2^24; beyond, to_chars picks
      // the fixed digits closest to v, which may not end in zeros.
      if (v >= 16777216.0f) return std::to_chars(start, start + 32, orig).ptr;
      writeDigitsBackwards(p + n, sig);
      writeZeros(p + n, exp);
      return p + n + exp;
    }
    if (n + exp > 0) {  // d.ddd
      const int int_digits = n + exp;
      writeDigitsBackwards(p + n + 1, sig);
      std::memmove(p, p + 1, static_cast<size_t>(int_digits));
      p[int_digits] = '.';
      return p + n + 1;
    }
    // 0.000ddd
    const int zeros = -exp - n;
    p[0] = '0';
    p[1] = '.';
    writeZeros(p + 2, zeros);
    writeDigitsBackwards(p + 2 + zeros + n, sig);
    return p + 2 + zeros + n;
  }
  // d[.ddd]e[+-]XX
  if (n > 1) {
    writeDigitsBackwards(p + n + 1, sig);
    p[0] = p[1];
    p[1] = '.';
    p += n + 1;
  } else {
    *p++ = static_cast<char>('0' + sig);
  }
  *p++ = 'e';
  *p++ = sci_exp < 0 ? '-' : '+';
  if (abs_sci >= 100) {
    *p++ = static_cast<char>('0' + abs_sci / 100);
  }
  std::memcpy(p, kDigitPairs + 2 * (abs_sci % 100), 2);
  return p + 2;
}

uint8_t* writeBytesElement(uint8_t* dst, std::string_view s) {
  const uint32_t len = static_cast<uint32_t>(s.size());  // < 4 GiB: the JSON holding it is
  std::memcpy(dst, &len, 4);
  if (!s.empty()) std::memcpy(dst + 4, s.data(), s.size());
  return dst + 4 + s.size();
}

void appendBytesElement(std::vector<uint8_t>& out, std::string_view s) {
  const size_t at = out.size();
  out.resize(at + 4 + s.size());
  writeBytesElement(out.data() + at, s);
}

}  // namespace infergate::frontend::tensor_json
