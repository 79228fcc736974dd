#include "frontend/tensor_json.h"

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
