#pragma once
// Hand-built HTTP/2 client bytes for the session tests: frames and HPACK literals.

#include <cstdint>
#include <string>
#include <string_view>

#include "tests/mocks/h2_frame_header.h"

namespace infergate::frontend::testing {

// One frame: 9-byte header (length, type, flags, stream) and the payload.
inline std::string frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string f =
      mocks::h2FrameHeader(static_cast<uint32_t>(payload.size()), type, flags, stream);
  f.append(payload);
  return f;
}

// HPACK literal without indexing, new name, lengths < 127.
inline std::string literal(std::string_view n, std::string_view v) {
  std::string s(1, '\0');
  s += static_cast<char>(n.size());
  s.append(n);
  s += static_cast<char>(v.size());
  s.append(v);
  return s;
}

}  // namespace infergate::frontend::testing
