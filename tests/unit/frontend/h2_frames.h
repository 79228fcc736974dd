#pragma once
// Hand-built HTTP/2 client bytes for the session tests: frames and HPACK literals.

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <map>
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

// Decodes one HEADERS payload with `inflater` (which keeps the HPACK state of the connection)
// into `out`.
inline void inflateHeaders(nghttp2_hd_inflater* inflater, std::string_view payload,
                           std::map<std::string, std::string>& out) {
  const auto* in = reinterpret_cast<const uint8_t*>(payload.data());
  size_t left = payload.size();
  for (;;) {
    nghttp2_nv nv;
    int fl = 0;
    const ssize_t r = nghttp2_hd_inflate_hd2(inflater, &nv, &fl, in, left, 1);
    if (r < 0) break;
    in += r;
    left -= static_cast<size_t>(r);
    if (fl & NGHTTP2_HD_INFLATE_EMIT) {
      out[std::string(reinterpret_cast<char*>(nv.name), nv.namelen)] =
          std::string(reinterpret_cast<char*>(nv.value), nv.valuelen);
    }
    if (fl & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(inflater);
      break;
    }
    if (r == 0 && left == 0) break;
  }
}

}  // namespace infergate::frontend::testing
