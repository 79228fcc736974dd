// libFuzzer target: what a backend sends back to backends::GrpcEndpoint (backends/grpc_client.h,
// our unary gRPC client on nghttp2). A backend may be compromised or buggy, so its bytes are
// untrusted input: HTTP/2 frames, HEADERS / trailers (:status, grpc-status, grpc-message with
// percent escapes), the gRPC length-prefixed message, RST_STREAM, GOAWAY, anything.
//
// The harness is a loopback listener the endpoints connect to (no test seam: the production
// code runs unchanged, sockets, I/O thread and all). Per input: one unary call is started; the
// harness accepts the connection, reads the client's preface and request (up to END_STREAM on
// stream 1), writes the input's bytes in chunks, optionally checks that the client is still
// alive (see bit 3), half-closes, reads until the client closes, and waits for the call's done.
// Endpoints and listener are reused across inputs (each input gets a fresh connection: the
// previous one is closed before the next call, so the stream is always 1).
//
// Invariants (abort: libFuzzer keeps the input):
//   - done runs exactly once per call, within 2 s of the backend closing;
//   - the client closes its end within 2 s of the backend's half-close;
//   - with bit 3, after bytes that are whole HTTP/2 frames, the client either answers a PING or
//     closes the connection within 2 s (a client that stopped reading -- a terminated nghttp2
//     session -- yet keeps the connection open would wedge the channel and every call on it);
//   - an OK result holds a body no larger than the message limit, readable to its last byte;
//     a failed one holds no body; the status code is a canonical gRPC code (0..16);
//   - an OK body goes through the backends' response decoders (ModelInferResponse,
//     PredictResponse, GetModelStatusResponse): the raw views they return lie inside the body
//     (or, for DT_STRING, the storage they were laid out in) and are readable.
//
// Input: [config][chunk] then the backend's bytes.
//   config bit 0: the endpoint with a 64-byte message limit (else 1 MiB)
//          bit 1: the call has a 10 s deadline (grpc-timeout sent; never expires here)
//          bit 2: an empty SETTINGS frame (the server preface) is sent before the bytes
//          bit 3: PING liveness check after the bytes (only when they are whole frames)
//          bits 4-5: the request: 0 "x" (copied), 1 empty, 2 ModelInferEncoding pieces, 3 "x"
//   chunk: 0 all bytes in one send(), else sends of `chunk` bytes each (TCP_NODELAY).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "backends/grpc_client.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fuzz_common.h"

namespace be = infergate::backends;

namespace {

constexpr int kBoundMs = 2000;
constexpr int kSmallLimit = 64;
constexpr int kLargeLimit = 1 << 20;
constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr char kPingOpaque[8] = {'i', 'g', '-', 'f', 'u', 'z', 'z', '!'};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits for `fd` to be readable until `deadline_ms`; false on timeout.
bool waitReadable(int fd, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - nowMs();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) fail("poll failed");
  }
}

struct World {
  World() {
    spdlog::set_level(spdlog::level::off);
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listener, 16) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      fail("cannot listen on loopback");
    }
    const std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    large = new be::GrpcEndpoint(addr, 1, kLargeLimit);  // never destroyed (threads)
    small = new be::GrpcEndpoint(addr, 1, kSmallLimit);
  }
  int listener = -1;
  be::GrpcEndpoint* large = nullptr;
  be::GrpcEndpoint* small = nullptr;
};

// One call's completion, shared with its done callback.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  int runs = 0;
  be::GrpcResult result;
};

// Reads the client's bytes into `in` until `stop(in)` says so, EOF/reset (returns false) or
// the bound (aborts with `what`).
template <typename Stop>
bool readUntil(int fd, std::string& in, Stop stop, const char* what) {
  const int64_t deadline = nowMs() + kBoundMs;
  char buf[16384];
  while (!stop(in)) {
    if (!waitReadable(fd, deadline)) fail(what);
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      return false;
    }
  }
  return true;
}

// Walks whole client frames in `in` after `*pos`; calls f(type, flags, stream, payload) for
// each; leaves `*pos` at the first incomplete frame; true when f returns true.
template <typename F>
bool walkFrames(const std::string& in, size_t* pos, F f) {
  while (in.size() - *pos >= 9) {
    const auto* p = reinterpret_cast<const uint8_t*>(in.data() + *pos);
    const size_t len = (size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2];
    if (in.size() - *pos < 9 + len) break;
    const uint32_t stream =
        ((uint32_t{p[5]} & 0x7f) << 24) | (uint32_t{p[6]} << 16) | (uint32_t{p[7]} << 8) | p[8];
    const bool hit = f(p[3], p[4], stream, std::string_view(in.data() + *pos + 9, len));
    *pos += 9 + len;
    if (hit) return true;
  }
  return false;
}

// True when `b` is a sequence of whole HTTP/2 frames (by their length fields).
bool wholeFrames(std::string_view b) {
  size_t pos = 0;
  while (pos < b.size()) {
    if (b.size() - pos < 9) return false;
    const auto* p = reinterpret_cast<const uint8_t*>(b.data() + pos);
    pos += 9 + ((size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2]);
  }
  return pos == b.size();
}

void sendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // the client closed: fine (it may fail the connection at once)
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World;
  infergate::fuzz::Reader in(data, size);
  const uint8_t config = in.u8();
  const uint8_t chunk = in.u8();
  const std::string_view bytes = in.rest();
  const bool small = (config & 1) != 0;
  be::GrpcEndpoint& ep = small ? *world->small : *world->large;
  const int limit = small ? kSmallLimit : kLargeLimit;

  auto done = std::make_shared<Done>();
  auto cb = [done](be::GrpcResult r) {
    std::lock_guard<std::mutex> lock(done->mu);
    if (++done->runs > 1) fail("done ran twice");
    done->result = std::move(r);
    done->cv.notify_all();
  };
  const uint64_t timeout_ms = (config & 2) ? 10000 : 0;
  static const std::string kMeta = "head|tail";
  static const std::string kTensor(40, 't');
  be::wire::ModelInferEncoding enc;  // referenced by the call until its done ran
  switch ((config >> 4) & 3) {
    case 1:
      ep.call(be::kMethodModelInfer, std::string(), timeout_ms, cb);
      break;
    case 2: {
      enc.meta = kMeta;
      enc.pieces.push_back({false, 0, nullptr, 5});
      enc.pieces.push_back(
          {true, 0, reinterpret_cast<const uint8_t*>(kTensor.data()), small ? 8 : kTensor.size()});
      enc.pieces.push_back({false, 5, nullptr, 4});
      ep.call(be::kMethodModelInfer, enc, timeout_ms, cb);
      break;
    }
    default:
      ep.call(be::kMethodModelInfer, std::string("x"), timeout_ms, cb);
      break;
  }

  // The connection (a fresh one: the previous input's was closed before its done was awaited).
  if (!waitReadable(world->listener, nowMs() + kBoundMs)) fail("the client did not connect");
  const int fd = accept4(world->listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) fail("accept failed");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  // The client's preface and request, up to END_STREAM on stream 1.
  std::string got;
  size_t pos = kPreface.size();
  bool request_seen = false;
  readUntil(
      fd, got,
      [&](const std::string& b) {
        if (b.size() < kPreface.size()) return false;
        if (b.compare(0, kPreface.size(), kPreface) != 0) fail("no client preface");
        request_seen =
            walkFrames(b, &pos, [](uint8_t type, uint8_t flags, uint32_t stream, std::string_view) {
              return stream == 1 && (type == 0 || type == 1) && (flags & 1);
            });
        return request_seen;
      },
      "the client's request did not arrive");
  if (!request_seen) fail("the client closed before sending its request");

  // The backend's answer.
  if (config & 4) sendAll(fd, "\0\0\0\4\0\0\0\0\0", 9);
  if (chunk == 0) {
    sendAll(fd, bytes.data(), bytes.size());
  } else {
    for (size_t off = 0; off < bytes.size(); off += chunk) {
      sendAll(fd, bytes.data() + off, std::min<size_t>(chunk, bytes.size() - off));
    }
  }

  // Liveness: after whole frames the client answers a PING or closes, never neither.
  if ((config & 8) && wholeFrames(bytes)) {
    std::string ping("\0\0\x08\x06\0\0\0\0\0", 9);
    ping.append(kPingOpaque, sizeof kPingOpaque);
    sendAll(fd, ping.data(), ping.size());
    readUntil(
        fd, got,
        [&](const std::string& b) {
          return walkFrames(b, &pos,
                            [](uint8_t type, uint8_t flags, uint32_t, std::string_view payload) {
                              return type == 6 && (flags & 1) &&
                                     payload == std::string_view(kPingOpaque, sizeof kPingOpaque);
                            });
        },
        "the client neither answered a PING nor closed the connection (wedged)");
  }

  // Half-close; the client must see it and close its end.
  shutdown(fd, SHUT_WR);
  readUntil(
      fd, got, [](const std::string&) { return false; },
      "the client did not close after the backend's half-close");
  close(fd);

  {
    std::unique_lock<std::mutex> lock(done->mu);
    if (!done->cv.wait_for(lock, std::chrono::milliseconds(kBoundMs),
                           [&] { return done->runs > 0; })) {
      fail("done did not run within 2 s of the connection's end");
    }
  }
  const be::GrpcResult& r = done->result;
  FUZZ_CHECK(static_cast<int>(r.status.code()) >= 0 && static_cast<int>(r.status.code()) <= 16);
  if (r.status.ok()) {
    FUZZ_CHECK(r.owner != nullptr);
    FUZZ_CHECK(r.body.size() <= static_cast<size_t>(limit));
    unsigned sum = 0;
    for (char ch : r.body) sum += static_cast<uint8_t>(ch);  // ASan: every byte readable
    // The body is the backend's message: the response decoders the backends use on it
    // (triton_backend.cc, tfserving_backend.cc). Raw views must lie inside what they came from.
    auto inside = [](const uint8_t* p, size_t n, std::string_view in) {
      const auto* b = reinterpret_cast<const uint8_t*>(in.data());
      return p >= b && n <= in.size() && p - b <= static_cast<ptrdiff_t>(in.size() - n);
    };
    auto check = [&](const auto& outs, std::string_view storage) {
      if (!outs.ok()) return;
      for (const auto& o : *outs) {
        if (o.raw == nullptr || o.raw_bytes == 0) continue;  // an empty tensor may point at ""
        FUZZ_CHECK(inside(o.raw, o.raw_bytes, r.body) || inside(o.raw, o.raw_bytes, storage));
        for (size_t i = 0; i < o.raw_bytes; ++i) sum += o.raw[i];
      }
    };
    check(be::wire::decodeModelInferResponse(r.body), {});
    std::string strings;
    auto predict = be::wire::decodePredictResponse(r.body, strings);
    check(predict, strings);
    (void)be::wire::decodeModelStatus(r.body);
    (void)sum;
  } else {
    FUZZ_CHECK(r.body.empty());
  }
  return 0;
}
