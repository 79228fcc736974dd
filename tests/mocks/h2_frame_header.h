#pragma once
// An HTTP/2 frame header (RFC 9113 section 4.1) as a client writes it, for the HTTP/2 session
// tests and fuzzers and the XDP classifier fixtures.

#include <cstdint>
#include <string>

namespace infergate::mocks {

// 24-bit payload length, type, flags, 31-bit stream id (reserved bit as given), big-endian.
inline std::string h2FrameHeader(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  const char b[9] = {static_cast<char>(length >> 16), static_cast<char>(length >> 8),
                     static_cast<char>(length),       static_cast<char>(type),
                     static_cast<char>(flags),        static_cast<char>(stream >> 24),
                     static_cast<char>(stream >> 16), static_cast<char>(stream >> 8),
                     static_cast<char>(stream)};
  return std::string(b, sizeof(b));
}

}  // namespace infergate::mocks
