// backends::GrpcEndpoint (the remote backends' HTTP/2 gRPC client) against a real gRPC C++
// server in this process: responses, statuses and messages, deadlines, refused connections,
// message limits, requests in pieces of external memory, and reconnection after a restart.
#include "backends/grpc_client.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "tests/unit/backends/fake_grpc_server.h"
#include "tests/unit/backends/test_util.h"
#include "tests/unit/frontend/h2_frames.h"

// Allocation failure injection for this test binary: operator new throws std::bad_alloc for a
// request of exactly g_fail_alloc_size bytes (0: never). Not under AddressSanitizer, which
// owns operator new there (the test that needs it is skipped).
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IG_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define IG_TEST_ASAN 1
#endif
namespace {
std::atomic<size_t> g_fail_alloc_size{0};
std::atomic<int> g_failed_allocs{0};
}  // namespace
#ifndef IG_TEST_ASAN
void* operator new(size_t size) {
  const size_t fail = g_fail_alloc_size.load(std::memory_order_relaxed);
  if (fail != 0 && size == fail) {
    g_failed_allocs.fetch_add(1);
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;  // NOLINT: the replacement itself
  throw std::bad_alloc();
}
// gcc cannot tell these pair with the replacement above.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }  // NOLINT
void operator delete(void* p, size_t) noexcept { std::free(p); }  // NOLINT
#pragma GCC diagnostic pop
#endif

namespace infergate::backends {
namespace {

using test_util::FakeGrpcServer;

std::string text(const GrpcResult& r) { return std::string(r.body); }

TEST(GrpcEndpoint, EchoesRequestsInPiecesOfExternalMemory) {
  FakeGrpcServer server;
  ASSERT_GT(server.port(), 0);
  GrpcEndpoint ep(server.address(), 2, 64 << 20);
  std::string tensor(1 << 20, '\0');  // 1 MiB: several DATA frames and window updates
  for (size_t i = 0; i < tensor.size(); ++i) tensor[i] = static_cast<char>(i * 7);
  wire::ModelInferEncoding enc;
  enc.meta = "head|tail";
  enc.pieces.push_back({false, 0, nullptr, 5});
  enc.pieces.push_back({true, 0, reinterpret_cast<const uint8_t*>(tensor.data()), tensor.size()});
  enc.pieces.push_back({false, 5, nullptr, 4});
  for (int i = 0; i < 4; ++i) {  // both channels, twice
    std::promise<GrpcResult> p;
    ep.call("/t/Echo", enc, 5000, [&p](GrpcResult r) { p.set_value(std::move(r)); });
    GrpcResult r = p.get_future().get();
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(text(r), "head|" + tensor + "tail");
  }
  GrpcResult small = ep.callSync("/t/Echo", "hello", 5000);
  ASSERT_TRUE(small.status.ok()) << small.status;
  EXPECT_EQ(text(small), "hello");
  GrpcResult empty = ep.callSync("/t/Echo", "", 5000);
  ASSERT_TRUE(empty.status.ok()) << empty.status;
  EXPECT_EQ(text(empty), "");
  EXPECT_TRUE(ep.reachable());
}

TEST(GrpcEndpoint, ReportsTheServersStatusAndMessage) {
  FakeGrpcServer server;
  GrpcEndpoint ep(server.address(), 1, 64 << 20);
  GrpcResult r = ep.callSync("/t/Fail", "x", 5000);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status.message(), "bad: 100% \xc3\xbc");
  EXPECT_FALSE(r.not_sent);
  GrpcResult u = ep.callSync("/t/NoSuchMethod", "x", 5000);
  EXPECT_EQ(u.status.code(), absl::StatusCode::kUnimplemented) << u.status;
}

TEST(GrpcEndpoint, DeadlineExceededCancelsTheCallAtTheServer) {
  FakeGrpcServer server;
  GrpcEndpoint ep(server.address(), 1, 64 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  GrpcResult r = ep.callSync("/t/Slow", "x", 100);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
  EXPECT_FALSE(r.not_sent);
  EXPECT_GE(ms, 90);
  EXPECT_LT(ms, 2000);
  for (int i = 0; i < 100 && server.service().cancelled.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server.service().cancelled.load(), 1);
  // The connection still serves.
  EXPECT_TRUE(ep.callSync("/t/Echo", "ok", 5000).status.ok());
}

TEST(GrpcEndpoint, RefusedConnectionIsNotSentAndFailsFastDuringBackOff) {
  const int port = test_util::unusedLoopbackPort();
  GrpcEndpoint ep("127.0.0.1:" + std::to_string(port), 1, 64 << 20);
  GrpcResult r = ep.callSync("/t/Echo", "x", 5000);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(r.not_sent);
  EXPECT_NE(r.status.message().find("Connection refused"), std::string::npos) << r.status;
  EXPECT_FALSE(ep.reachable());
  GrpcResult again = ep.callSync("/t/Echo", "x", 5000);
  EXPECT_EQ(again.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(again.not_sent);
}

TEST(GrpcEndpoint, ResponseOverTheLimitIsResourceExhausted) {
  FakeGrpcServer server;
  GrpcEndpoint ep(server.address(), 1, 1 << 20);
  GrpcResult r = ep.callSync("/t/Big", "x", 5000);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
  GrpcResult big = ep.callSync("/t/Echo", std::string(2 << 20, 'x'), 5000);
  EXPECT_EQ(big.status.code(), absl::StatusCode::kResourceExhausted) << big.status;
  EXPECT_TRUE(big.not_sent);
  EXPECT_TRUE(ep.callSync("/t/Echo", "ok", 5000).status.ok());
}

TEST(GrpcEndpoint, ReconnectsAfterTheServerRestarts) {
  auto server = std::make_unique<FakeGrpcServer>();
  const int port = server->port();
  GrpcEndpoint ep(server->address(), 1, 64 << 20);
  ASSERT_TRUE(ep.callSync("/t/Echo", "one", 5000).status.ok());
  server->stop();
  GrpcResult down = ep.callSync("/t/Echo", "x", 5000);
  EXPECT_EQ(down.status.code(), absl::StatusCode::kUnavailable) << down.status;
  server = std::make_unique<FakeGrpcServer>(port);
  ASSERT_EQ(server->port(), port);
  bool ok = false;
  for (int i = 0; i < 60 && !ok; ++i) {  // back-off is at most 1 s
    ok = ep.callSync("/t/Echo", "two", 5000).status.ok();
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(ok);
}

TEST(GrpcEndpoint, PostRunsOnTheIoThreadNotTheCaller) {
  FakeGrpcServer server;
  GrpcEndpoint ep(server.address(), 1, 64 << 20);
  std::promise<std::thread::id> ran;
  ep.post([&ran] { ran.set_value(std::this_thread::get_id()); });
  auto f = ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
  // A call started from posted work completes as any other.
  std::promise<GrpcResult> p;
  ep.post([&] {
    ep.call("/t/Echo", std::string("posted"), 5000,
            [&p](GrpcResult r) { p.set_value(std::move(r)); });
  });
  GrpcResult r = p.get_future().get();
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(text(r), "posted");
}

// A raw HTTP/2 "backend" on loopback for answers a real server would not give (tests of what a
// compromised or buggy backend can send; tests/fuzz/grpc_client_fuzz.cc fuzzes the same): it
// accepts one connection, reads the client's preface and request, writes `answer`, then keeps
// the connection open (reading) until the client closes it or the test ends.
class RawBackend {
 public:
  explicit RawBackend(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RawBackend() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // True once the client closed the connection (EOF or reset).
  bool clientClosed() const { return client_closed_.load(); }

 private:
  // Waits up to 20 ms for `fd` to be readable.
  static bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 20) > 0;
  }
  void serve() {
    while (!stop_ && !readable(listener_)) {
    }
    if (stop_) return;
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    std::string got;
    char buf[4096];
    // The preface, SETTINGS and the request (HEADERS + DATA with END_STREAM) come in one write.
    while (!stop_ && got.size() < 24 + 9) {
      if (!readable(fd)) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    ::send(fd, answer_.data(), answer_.size(), MSG_NOSIGNAL);
    while (!stop_) {
      if (!readable(fd)) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        client_closed_ = true;
        break;
      }
    }
    ::close(fd);
  }
  std::string answer_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> client_closed_{false};
  std::thread thread_;
};

namespace h2 = infergate::frontend::testing;

std::string serverSettings() { return h2::frame(4, 0, 0, ""); }

// A connection error (DATA on stream 0: PROTOCOL_ERROR) makes nghttp2 end the session (it sends
// GOAWAY and reads nothing more); the backend keeps the TCP connection open. The client must
// drop the connection and fail the call at once, not leave it (and every later call on that
// channel) waiting for the deadline. Found by fuzz_grpc_client (data_on_stream_0).
TEST(GrpcEndpointHostileBackend, ProtocolErrorClosesTheConnectionAndFailsTheCall) {
  RawBackend backend(serverSettings() + h2::frame(0, 0, 0, "boom"));
  GrpcEndpoint ep(backend.address(), 1, 64 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  GrpcResult r = ep.callSync(kMethodModelInfer, "x", 5000);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_LT(ms, 2000);
  for (int i = 0; i < 100 && !backend.clientClosed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(backend.clientClosed());
}

// An allocation failure inside an nghttp2 callback (here: decoding a 117-byte grpc-message)
// must not unwind through nghttp2's C frames (std::terminate, before): the session ends, the
// connection is closed and the call fails UNAVAILABLE at once.
TEST(GrpcEndpointHostileBackend, AllocationFailureInACallbackFailsTheCallNotTheProcess) {
#ifdef IG_TEST_ASAN
  GTEST_SKIP() << "allocation failure injection replaces operator new: not under ASan";
#endif
  const std::string message(117, 'x');  // one HPACK length byte
  RawBackend backend(
      serverSettings() +
      h2::frame(1, 4, 1,
                h2::literal(":status", "200") + h2::literal("content-type", "application/grpc")) +
      h2::frame(1, 5, 1, h2::literal("grpc-status", "13") + h2::literal("grpc-message", message)));
  GrpcEndpoint ep(backend.address(), 1, 64 << 20);
  g_fail_alloc_size.store(message.size() + 1);  // percentDecode's reserve
  GrpcResult r = ep.callSync(kMethodModelInfer, "x", 5000);
  g_fail_alloc_size.store(0);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_GE(g_failed_allocs.load(), 1);
}

// grpc-status is a decimal number from a backend we do not trust: one that is not a number, or
// too long for an int (signed overflow, undefined behaviour, before), is UNKNOWN, not OK.
TEST(GrpcEndpointHostileBackend, MalformedGrpcStatusIsUnknown) {
  const std::string msg("\0\0\0\0\2ok", 7);
  for (const char* status : {"99999999999999999999", "OK", "", "-1", "0x0"}) {
    RawBackend backend(
        serverSettings() +
        h2::frame(1, 4, 1,
                  h2::literal(":status", "200") + h2::literal("content-type", "application/grpc")) +
        h2::frame(0, 0, 1, msg) + h2::frame(1, 5, 1, h2::literal("grpc-status", status)));
    GrpcEndpoint ep(backend.address(), 1, 64 << 20);
    GrpcResult r = ep.callSync(kMethodModelInfer, "x", 5000);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnknown) << status << ": " << r.status;
    EXPECT_TRUE(r.body.empty()) << status;
  }
  // The same answer with grpc-status 0 is OK (the frames themselves are right).
  RawBackend good(
      serverSettings() +
      h2::frame(1, 4, 1,
                h2::literal(":status", "200") + h2::literal("content-type", "application/grpc")) +
      h2::frame(0, 0, 1, msg) + h2::frame(1, 5, 1, h2::literal("grpc-status", "0")));
  GrpcEndpoint ep(good.address(), 1, 64 << 20);
  GrpcResult r = ep.callSync(kMethodModelInfer, "x", 5000);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(text(r), "ok");
}

}  // namespace
}  // namespace infergate::backends
