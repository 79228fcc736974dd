// libFuzzer target: HTTP/2 + gRPC as a connection sees it: Http2Session
// (frontend/http2_session.h, nghttp2 underneath) over a fake transport
// (tests/mocks/fake_transport.h), serving InferenceGrpcServices (KServe v2
// GRPCInferenceService and TF Serving Predict) over the in-process fuzz models
// (tests/fuzz/fuzz_common.h). The client preface is sent first; then the input is a sequence of
// records: raw reads, frames with a right length field, HEADERS built from a menu of gRPC paths
// and headers (HPACK literals, so the fuzzer need not learn HPACK to reach the services),
// gRPC messages in DATA frames, clock ticks (deadlines, idle timeout), half-close and graceful
// shutdown. Invariants: nothing crashes, throws through nghttp2 or leaks; what is sent is whole
// HTTP/2 frames starting with SETTINGS; the output stays within a fixed multiple of the input.
//
// Input: [config] then records until the input ends. config: bit 0 small limits (4 streams,
// 1 KiB messages and header lists, 64 KiB windows), bit 1 an ingress tag (class from bits 2-3).
//   Record, first byte h: kind h & 7
//     0 read: [len:2] + bytes, as one onData
//     1 frame: [type][flags][stream][len:2] + payload; h bit 7: sent in two reads
//     2 HEADERS: [stream][flags][path][extra len] + HPACK bytes appended after the request
//       headers. path: bits 0-3 which :path (kPaths), bit 4 grpc-timeout 100m, bit 5
//       x-infergate-priority 1, bit 6 grpc-encoding gzip, bit 7 content-type text/plain
//     3 gRPC message: [stream][flags][len:2] + message, in one DATA frame with its prefix
//     4 tick: the clock moves (h >> 3) * 250 ms, then onTick
//     5 the client half-closes; 6 graceful shutdown (onDrain)
//     7 short read: (h >> 3) bytes follow, as one onData
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "frontend/grpc_inference_service.h"
#include "frontend/http2_session.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/mocks/fake_transport.h"
#include "tests/mocks/session_events.h"
#include "tests/unit/frontend/h2_frames.h"

namespace fz = infergate::fuzz;
namespace fe = infergate::frontend;

namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr std::string_view kPaths[] = {
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ModelStreamInfer",
    "/tensorflow.serving.PredictionService/Predict",
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/inference.GRPCInferenceService/ModelReady",
    "/inference.GRPCInferenceService/ServerMetadata",
    "/inference.GRPCInferenceService/ModelMetadata",
    "/inference.GRPCInferenceService/Nope",
};

struct World {
  World() {
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" lines on every odd string
    fz::addFuzzModels(registry);
    services = std::make_unique<fe::InferenceGrpcServices>(
        registry, fe::ServerInfo{"infergate", "0"}, nullptr);
  }
  infergate::backends::ModelRegistry registry;
  std::unique_ptr<fe::InferenceGrpcServices> services;
};

// Checks that `out` is whole frames (the first one SETTINGS on stream 0) and consumes them.
void checkFrames(std::string& out, bool& first) {
  size_t pos = 0;
  while (out.size() - pos >= 9) {
    const uint32_t n = (uint32_t(uint8_t(out[pos])) << 16) | (uint32_t(uint8_t(out[pos + 1])) << 8) |
                       uint8_t(out[pos + 2]);
    const uint8_t type = uint8_t(out[pos + 3]);
    FUZZ_CHECK(type <= 9);  // nothing but RFC 9113 frames
    if (first) {
      FUZZ_CHECK(type == 4);
      first = false;
    }
    FUZZ_CHECK(out.size() - pos >= 9 + n);  // nghttp2 hands out whole frames
    pos += 9 + n;
  }
  FUZZ_CHECK(pos == out.size());
  out.clear();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World world;
  using fe::testing::frame;
  using fe::testing::literal;
  fz::Reader in(data, size);
  const uint8_t config = in.u8();
  fe::Http2SessionOptions options;
  options.idle_timeout_ns = 5'000'000'000;
  if (config & 1) {
    options.max_concurrent_streams = 4;
    options.max_header_list_bytes = 1024;
    options.max_message_bytes = 1024;
    options.initial_window_bytes = 65535;
    options.connection_window_bytes = 65535;
    options.max_pending_bytes = 4096;
  }
  infergate::mocks::FakeTransport transport;
  if (config & 2) {
    infergate::net::IngressTag tag;
    tag.priority_class = (config >> 2) & 3;
    transport.tag = tag;
  }
  auto session = std::make_shared<fe::Http2Session>(transport, *world.services, options, nullptr);

  size_t in_bytes = kPreface.size(), out_bytes = 0;
  bool first = true, peer_closed = false;
  auto read = [&](std::string_view bytes) {
    if (peer_closed || transport.closed || bytes.empty()) return;
    session->onData(bytes.data(), bytes.size());
  };
  auto send = [&](std::string_view bytes) {  // counted as input even when not read
    in_bytes += bytes.size();
    read(bytes);
  };
  auto settle = [&] {
    transport.loop_.runPosted();
    out_bytes += transport.out.size();
    checkFrames(transport.out, first);
    FUZZ_CHECK(out_bytes <= 65536 + 32 * in_bytes);
  };
  read(kPreface);
  settle();
  while (!in.empty() && !transport.closed) {
    const uint8_t h = in.u8();
    switch (h & 7) {
      case 0:
        send(in.bytes(in.u16()));
        break;
      case 1: {
        const uint8_t type = in.u8(), flags = in.u8(), stream = in.u8();
        const std::string_view payload = in.bytes(in.u16());
        const std::string f = frame(type, flags, stream, payload);
        in_bytes += f.size();
        if (h & 0x80) {
          read(std::string_view(f).substr(0, f.size() / 2));
          read(std::string_view(f).substr(f.size() / 2));
        } else {
          read(f);
        }
        break;
      }
      case 2: {
        const uint8_t stream = in.u8(), flags = in.u8(), path = in.u8();
        const std::string_view extra = in.bytes(in.u8());
        std::string block = literal(":method", "POST") + literal(":scheme", "http") +
                            literal(":path", kPaths[(path & 15) % std::size(kPaths)]) +
                            literal(":authority", "x") +
                            literal("content-type", (path & 0x80) ? "text/plain" : "application/grpc") +
                            literal("te", "trailers");
        if (path & 0x10) block += literal("grpc-timeout", "100m");
        if (path & 0x20) block += literal("x-infergate-priority", "1");
        if (path & 0x40) block += literal("grpc-encoding", "gzip");
        block.append(extra);
        send(frame(1, flags, stream, block));
        break;
      }
      case 3: {
        const uint8_t stream = in.u8(), flags = in.u8();
        const std::string_view message = in.bytes(in.u16());
        std::string payload;
        fe::appendGrpcMessage(payload, message);
        send(frame(0, flags, stream, payload));
        break;
      }
      case 4:
        infergate::mocks::advanceAndTick(transport, *session, h >> 3);
        break;
      case 5:
        infergate::mocks::peerClosesOnce(peer_closed, *session);
        break;
      case 6:
        session->onDrain();
        break;
      case 7:
        send(in.bytes(h >> 3));
        break;
    }
    settle();
  }
  session->onClosed();
  settle();
  return 0;
}
