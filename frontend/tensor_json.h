#pragma once
// The JSON tensor codec core shared by the KServe REST codec (kserve_json.cc) and the TF Serving
// REST codec (tfserving_rest.cc): one JSON value <-> one tensor element, per datatype, and a
// reader over a tensor's stored elements. Each codec keeps its own framing (KServe's flat or
// nested "data", TF Serving's row/columnar lists), number formatting and error wording; what an
// element is, how a JSON number is checked and rounded into it, and how stored elements are
// read back, is written here once.
//
// Elements are stored as backends::Tensor documents them (little-endian, DataTypeTag::Storage;
// BYTES as a 4-byte length + bytes). Pure functions; callable from any thread.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/tensor.h"
#include "frontend/fp16.h"
#include "simdjson.h"

namespace infergate::frontend::tensor_json {

using backends::DataType;
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Why a JSON value is not an element of the datatype (the codec words the message).
enum class ValueError : uint8_t {
  kOk,
  kWrongType,   // not a number / bool / string as the datatype needs
  kNotInteger,  // a number with a fraction or exponent for an integer datatype
  kOutOfRange,  // a number beyond the datatype's range (for floats: beyond its finite range)
  kNesting,     // an array where a value was expected
};

// A JSON integer (typed INT64, or UINT64 above INT64_MAX) that fits T.
template <typename T>
ValueError readInteger(element e, T& out) {
  switch (e.type()) {
    case element_type::INT64: {
      int64_t v = 0;
      if (e.get_int64().get(v)) return ValueError::kWrongType;
      if constexpr (std::is_signed_v<T>) {
        if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
          return ValueError::kOutOfRange;
        }
      } else {
        if (v < 0 || static_cast<uint64_t>(v) > std::numeric_limits<T>::max()) {
          return ValueError::kOutOfRange;
        }
      }
      out = static_cast<T>(v);
      return ValueError::kOk;
    }
    case element_type::UINT64: {  // only values above INT64_MAX are typed UINT64
      uint64_t v = 0;
      if (e.get_uint64().get(v)) return ValueError::kWrongType;
      if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return ValueError::kOutOfRange;
      out = static_cast<T>(v);
      return ValueError::kOk;
    }
    case element_type::DOUBLE: return ValueError::kNotInteger;
    case element_type::ARRAY: return ValueError::kNesting;
    default: return ValueError::kWrongType;
  }
}

// Any JSON number, as a double.
ValueError readNumber(element e, double& out);
// true / false.
ValueError readBool(element e, bool& out);

// Per float datatype: a JSON number rounded (nearest-even) into the stored element, the stored
// element read back as a C float (FP16, BF16, FP32: exact) or double (FP64), and whether it is
// +-infinity.
template <class F>
struct NativeFloat {
  static F narrow(double v) { return static_cast<F>(v); }
  static F widen(F v) { return v; }
  static bool isInfinite(F v) { return std::isinf(v); }
};
template <uint16_t (*kNarrow)(double), float (*kWiden)(uint16_t), uint16_t kInfBits>
struct Float16Bits {
  static uint16_t narrow(double v) { return kNarrow(v); }
  static float widen(uint16_t v) { return kWiden(v); }
  static bool isInfinite(uint16_t v) { return (v & 0x7FFFu) == kInfBits; }
};
template <DataType D>
struct FloatElement;
template <>
struct FloatElement<DataType::kFp16> : Float16Bits<doubleToHalf, halfToFloat, 0x7C00u> {};
template <>
struct FloatElement<DataType::kBf16> : Float16Bits<doubleToBf16, bf16ToFloat, 0x7F80u> {};
template <>
struct FloatElement<DataType::kFp32> : NativeFloat<float> {};
template <>
struct FloatElement<DataType::kFp64> : NativeFloat<double> {};

template <class Tag>
typename Tag::Storage narrowFloat(double v) { return FloatElement<Tag::value>::narrow(v); }
template <class Tag>
auto widenFloat(typename Tag::Storage v) { return FloatElement<Tag::value>::widen(v); }
template <class Tag>
bool isInfinite(typename Tag::Storage v) { return FloatElement<Tag::value>::isInfinite(v); }

// The bytes std::to_chars(p, p + 32, v) writes for a float (plain format: the shortest
// round-trip digits, fixed or scientific, whichever is shorter, fixed on a tie), written at `p`
// (at least 32 bytes available); returns the end. A few times cheaper than libstdc++'s
// to_chars: the digits come from Dragonbox ({fmt}), only the rare values whose fixed form needs
// padding beyond 2^24 go to std::to_chars. Verified against std::to_chars on every float
// (tests/unit/frontend/float_format_test.cc).
char* toCharsShortest(char* p, float v);

// One BYTES element (4-byte little-endian length, then the bytes): written at `dst` (returns the
// end) or appended to `out`.
uint8_t* writeBytesElement(uint8_t* dst, std::string_view s);
void appendBytesElement(std::vector<uint8_t>& out, std::string_view s);

// Reads a tensor's stored elements in order. next() and nextBytes() return false, consuming
// nothing, when the rest does not hold a whole element (a malformed tensor).
class ElementReader {
 public:
  ElementReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  template <typename T>
  bool next(T& v) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }

  bool nextBytes(std::string_view& s) {
    uint32_t len = 0;
    if (remaining() < 4) return false;
    std::memcpy(&len, p_, 4);
    if (len > remaining() - 4) return false;
    s = std::string_view(reinterpret_cast<const char*>(p_) + 4, len);
    p_ += 4 + static_cast<size_t>(len);
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace infergate::frontend::tensor_json
