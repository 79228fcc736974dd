// libFuzzer target: gRPC length-prefixed framing (frontend/grpc_framing.h). The same bytes are fed
// to one GrpcMessageReader whole and to another in chunks the input chooses; both must yield the
// same messages and the same final status (the fast path that hands out views and the gathering
// path must agree), every message within the limit, the gathered bytes within what was fed.
// Also: parseGrpcTimeout on the leading bytes, and percent-decoding what was percent-encoded
// gives the bytes back.
//
// Input: [limit selector][chunk seed] then the DATA payload bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/grpc_framing.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using infergate::frontend::GrpcMessageReader;

struct Run {
  std::vector<std::string> messages;
  absl::StatusCode code = absl::StatusCode::kOk;
  bool at_boundary = true;
  uint64_t gathered = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  infergate::fuzz::Reader in(data, size);
  static constexpr size_t kLimits[] = {0, 1, 16, 1000, 64u << 20};
  const size_t limit = kLimits[in.u8() % 5];
  uint32_t seed = in.u8() * 2654435761u + 1;
  const std::string_view payload = in.rest();

  auto collect = [&](Run& run) {
    return [&run, limit](std::string_view m) {
      FUZZ_CHECK(m.size() <= limit);
      run.messages.emplace_back(m);
      return absl::OkStatus();
    };
  };

  Run whole;
  GrpcMessageReader a(limit);
  whole.code = a.feed(payload.data(), payload.size(), collect(whole)).code();
  whole.at_boundary = a.atBoundary();
  FUZZ_CHECK(a.gatheredBytes() <= payload.size());  // only a trailing partial message

  Run chunked;
  GrpcMessageReader b(limit);
  absl::Status st;
  for (size_t pos = 0; pos < payload.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(payload.size() - pos, 1 + (seed >> 16) % 64);
    st = b.feed(payload.data() + pos, n, collect(chunked));
    pos += n;
  }
  chunked.code = st.code();
  chunked.at_boundary = b.atBoundary();
  FUZZ_CHECK(b.gatheredBytes() <= payload.size());

  FUZZ_CHECK(whole.messages == chunked.messages);
  FUZZ_CHECK(whole.code == chunked.code);
  FUZZ_CHECK(whole.at_boundary == chunked.at_boundary);
  FUZZ_CHECK(a.messages() == whole.messages.size());

  // Framing what was read gives back the bytes that carried it (when all of them were used).
  if (whole.code == absl::StatusCode::kOk && whole.at_boundary) {
    std::string framed;
    for (const auto& m : whole.messages) infergate::frontend::appendGrpcMessage(framed, m);
    FUZZ_CHECK(framed == payload);
  }

  const std::string_view head = payload.substr(0, std::min<size_t>(payload.size(), 12));
  if (auto t = infergate::frontend::parseGrpcTimeout(head)) {
    FUZZ_CHECK(head.size() >= 2 && head.size() <= 9);
  }
  const std::string enc = infergate::frontend::percentEncodeGrpcMessage(payload);
  for (unsigned char c : enc) FUZZ_CHECK(c >= 0x20 && c <= 0x7E);
  FUZZ_CHECK(infergate::frontend::percentDecodeGrpcMessage(enc) == payload);
  (void)infergate::frontend::percentDecodeGrpcMessage(payload);
  return 0;
}
