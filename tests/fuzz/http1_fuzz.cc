// libFuzzer target: the HTTP/1.1 server side as a connection sees it: Http1Session
// (frontend/http1_session.h) over the strict parser (frontend/http1_parser.h), a fake transport
// (tests/mocks/fake_transport.h) and the KServe v2 REST router, which hands /v1/ paths
// to the TF Serving REST handler, over the in-process fuzz models (tests/fuzz/fuzz_common.h).
// The bytes arrive in the reads the input chooses; the clock moves; the client may half-close.
// A paused transport holds what arrives until it resumes; a closing one stops delivering.
// Invariants: nothing crashes or leaks, what is sent is HTTP/1.1 responses, and the output
// stays within a fixed multiple of the input.
//
// Input: [config] then records until the input ends. config: bit 0 small limits (1 KiB
// headers, 4 KiB bodies, 2 in flight), bit 1 cancel_on_peer_close, bit 2 a first request
// tagged by an ingress filter (priority class from bits 3-4, verdict from bits 5-6).
//   Record, first byte h: kind h & 3
//     0 read: [len:2] + bytes (delivered as one onData)
//     1 tick: the clock moves (h >> 2) * 250 ms, then onTick
//     2 the client half-closes (onPeerClosed)
//     3 short read: (h >> 2) bytes follow (0..63), delivered as one onData
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "frontend/kserve_rest.h"
#include "frontend/http1_session.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/mocks/fake_transport.h"
#include "tests/mocks/session_events.h"

namespace fz = infergate::fuzz;
namespace fe = infergate::frontend;

namespace {

struct World {
  World() {
    fz::addFuzzModels(registry);
    handler = std::make_unique<fe::KServeRestHandler>(registry, fe::ServerInfo{"infergate", "0"},
                                                      nullptr);
  }
  infergate::backends::ModelRegistry registry;
  std::unique_ptr<fe::KServeRestHandler> handler;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World world;
  fz::Reader in(data, size);
  const uint8_t config = in.u8();
  fe::Http1SessionOptions options;
  options.header_timeout_ns = 1'000'000'000;
  options.body_timeout_ns = 2'000'000'000;
  options.idle_timeout_ns = 4'000'000'000;
  if (config & 1) {
    options.limits.max_header_bytes = 1024;
    options.limits.max_target_bytes = 256;
    options.limits.max_body_bytes = 4096;
    options.limits.max_headers = 8;
    options.max_in_flight = 2;
    options.max_pending_bytes = 1024;
  }
  options.cancel_on_peer_close = config & 2;
  infergate::mocks::FakeTransport transport;
  if (config & 4) {
    infergate::net::IngressTag tag;
    tag.priority_class = (config >> 3) & 3;
    tag.verdict = static_cast<infergate::net::IngressTag::Verdict>(((config >> 5) & 3) % 3);
    transport.tag = tag;
  }
  auto session = std::make_shared<fe::Http1Session>(transport, *world.handler, options, nullptr);

  size_t in_bytes = 0, out_bytes = 0;
  std::string held;  // arrived while reading was paused
  auto settle = [&] {
    transport.loop_.runPosted();
    if (!transport.out.empty()) {
      FUZZ_CHECK(transport.out.compare(0, 9, "HTTP/1.1 ") == 0);
    }
    out_bytes += transport.out.size();
    transport.out.clear();
    FUZZ_CHECK(out_bytes <= 65536 + 16 * in_bytes);
  };
  bool peer_closed = false;
  auto arrive = [&](size_t n) {  // counted as input even after the FIN, when nothing follows
    const std::string_view bytes = in.bytes(n);
    in_bytes += bytes.size();
    if (!peer_closed) held.append(bytes);
  };
  while (!in.empty() && !transport.closed) {
    const uint8_t h = in.u8();
    switch (h & 3) {
      case 0:
        arrive(in.u16());
        break;
      case 1:
        infergate::mocks::advanceAndTick(transport, *session, h >> 2);
        break;
      case 2:
        if (held.empty()) infergate::mocks::peerClosesOnce(peer_closed, *session);
        break;
      case 3:
        arrive(h >> 2);
        break;
    }
    // A resumed transport delivers what it held, as one read.
    if (!transport.paused && !held.empty() && !transport.closed) {
      std::string chunk;
      chunk.swap(held);
      session->onData(chunk.data(), chunk.size());
    }
    settle();
  }
  session->onClosed();
  settle();
  return 0;
}
