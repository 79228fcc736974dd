// Http2Session over a fake transport and loop, with hand-built client frames: unary calls,
// messages split over DATA frames, Trailers-Only errors, deadlines, RST_STREAM cancellation,
// replies from other threads, protocol errors, graceful shutdown.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <deque>
#include <functional>
#include <map>
#include <new>
#include <thread>

#include "tests/mocks/fake_transport.h"
#include "tests/unit/frontend/h2_frames.h"
#include "common/metrics.h"
#include "frontend/http2_session.h"
#include "frontend/server_metrics.h"

namespace infergate::frontend {
namespace {

using mocks::FakeLoop;

// A transport that can say it delivers bytes from a copy of its own (net::Transport).
struct FakeTransport : mocks::FakeTransport {
  bool copying = false;
  bool deliveringCopy() const override { return copying; }
};

// What a streaming sink ("/t.S/Sink") was handed: each piece's address (to tell views of the
// fed bytes from copies), its bytes and its `copied` flag.
struct SinkLog {
  std::vector<uint32_t> begins;
  std::vector<std::pair<const char*, size_t>> pieces;
  std::vector<bool> copied;
  std::string bytes;
  int ends = 0;
  absl::Status refuse = absl::OkStatus();  // returned by every piece
};

class RecordingSink : public GrpcMessageSink {
 public:
  explicit RecordingSink(SinkLog& log) : log_(log) {}
  void begin(uint32_t size) override {
    log_.begins.push_back(size);
    message_.clear();
  }
  absl::Status piece(const char* data, size_t len, bool copied) override {
    log_.pieces.emplace_back(data, len);
    log_.copied.push_back(copied);
    log_.bytes.append(data, len);
    message_.append(data, len);
    return log_.refuse;
  }
  void end(GrpcCall&, GrpcRespond respond) override {
    ++log_.ends;
    GrpcReply r;
    appendGrpcMessage(r.framed, message_);
    respond(std::move(r));
  }
  size_t bufferedBytes() const override { return 0; }
  uint64_t gatheredBytes() const override { return 0; }

 private:
  SinkLog& log_;
  std::string message_;
};

// "/t.S/Echo" answers inline with the request bytes; "/t.S/Later" holds the reply;
// "/t.S/Stream" is client-streaming and echoes each message; "/t.S/Sink" takes its messages
// through a RecordingSink (GrpcServices::openSink) and echoes them.
class FakeServices : public GrpcServices {
 public:
  SinkLog sink_log;
  std::unique_ptr<GrpcMessageSink> openSink(const GrpcMethod& method, GrpcCall&) override {
    if (method.id != 4) return nullptr;
    return std::make_unique<RecordingSink>(sink_log);
  }
  std::vector<std::shared_ptr<net::CancelToken>> tokens;  // each call's GrpcCall::cancel
  GrpcMethod resolve(std::string_view path) const override {
    GrpcMethod m;
    if (path == "/t.S/Echo") m.id = 0;
    if (path == "/t.S/Later") m.id = 1;
    if (path == "/t.S/Throw") m.id = 3;  // the service throws std::bad_alloc
    if (path == "/t.S/Sink") {
      m.id = 4;
      m.streaming_decode = true;
    }
    if (path == "/t.S/Stream") {
      m.id = 2;
      m.client_streaming = true;
    }
    return m;
  }
  void call(const GrpcMethod& method, GrpcCall& call, std::string_view message,
            GrpcRespond respond) override {
    tokens.push_back(call.cancel);
    received.emplace_back(message);
    last_call = call;
    if (method.id == 3) throw std::bad_alloc();
    GrpcReply r;
    appendGrpcMessage(r.framed, message);
    if (method.id == 1) {
      later.emplace_back(std::move(respond), std::move(r));
      return;
    }
    respond(std::move(r));
  }
  std::vector<std::string> received;
  GrpcCall last_call;
  std::vector<std::pair<GrpcRespond, GrpcReply>> later;
};

using testing::frame;
using testing::literal;

std::string requestHeaders(std::string_view path, std::string_view extra = {}) {
  return literal(":method", "POST") + literal(":scheme", "http") + literal(":path", path) +
         literal(":authority", "x") + literal("content-type", "application/grpc") +
         literal("te", "trailers") + std::string(extra);
}

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr uint8_t kData = 0, kHeaders = 1, kRst = 3, kSettings = 4, kPing = 6, kGoaway = 7;

struct Frame {
  uint8_t type, flags;
  uint32_t stream;
  std::string payload;
  std::map<std::string, std::string> headers;  // decoded HEADERS
};

struct Fixture : ::testing::Test {
  Fixture() {
    options.idle_timeout_ns = 5'000'000'000;
    session = std::make_shared<Http2Session>(transport, services, options, nullptr);
    nghttp2_hd_inflate_new(&inflater);
  }
  ~Fixture() override { nghttp2_hd_inflate_del(inflater); }
  void feed(std::string_view s) { session->onData(s.data(), s.size()); }
  void start() { feed(std::string(kPreface) + frame(kSettings, 0, 0, "")); }
  // A new session with the test's `options`, its preface and SETTINGS exchanged (consumed).
  void restartWithOptions() {
    session = std::make_shared<Http2Session>(transport, services, options, nullptr);
    start();
    frames();
  }
  // `ns` pass on the loop's clock, then the session's timer tick.
  void advance(uint64_t ns) {
    transport.loop_.now += ns;
    session->onTick(transport.loop_.now);
  }
  // Parses everything sent so far (and consumes it).
  std::vector<Frame> frames() {
    std::vector<Frame> fs;
    std::string& o = transport.out;
    size_t pos = 0;
    while (o.size() - pos >= 9) {
      const uint32_t n = (uint8_t(o[pos]) << 16) | (uint8_t(o[pos + 1]) << 8) | uint8_t(o[pos + 2]);
      if (o.size() - pos < 9 + n) break;
      Frame f{uint8_t(o[pos + 3]), uint8_t(o[pos + 4]),
              static_cast<uint32_t>(((uint8_t(o[pos + 5]) & 0x7f) << 24) |
                                    (uint8_t(o[pos + 6]) << 16) | (uint8_t(o[pos + 7]) << 8) |
                                    uint8_t(o[pos + 8])),
              o.substr(pos + 9, n), {}};
      if (f.type == kHeaders) testing::inflateHeaders(inflater, f.payload, f.headers);
      fs.push_back(std::move(f));
      pos += 9 + n;
    }
    o.erase(0, pos);
    return fs;
  }
  static const Frame* find(const std::vector<Frame>& fs, uint8_t type, uint32_t stream,
                           int nth = 0) {
    for (const Frame& f : fs) {
      if (f.type == type && f.stream == stream && nth-- == 0) return &f;
    }
    return nullptr;
  }
  // What was sent so far (consumed) ends the call on `stream` with trailers (its second HEADERS)
  // saying grpc-status 0.
  void expectOkTrailers(uint32_t stream) {
    const std::vector<Frame> fs = frames();
    const Frame* t = find(fs, kHeaders, stream, 1);
    ASSERT_TRUE(t) << "no trailers on stream " << stream;
    EXPECT_EQ(t->headers.at("grpc-status"), "0");
  }
  static std::string grpc(std::string_view m) {
    std::string s;
    appendGrpcMessage(s, m);
    return s;
  }

  Http2SessionOptions options;
  FakeTransport transport;
  FakeServices services;
  std::shared_ptr<Http2Session> session;
  nghttp2_hd_inflater* inflater = nullptr;
};

TEST_F(Fixture, ServerPrefaceIsSettingsFromOptions) {
  auto fs = frames();
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].type, kSettings);
  // MAX_CONCURRENT_STREAMS (3) = 128 appears in the payload.
  EXPECT_NE(fs[0].payload.find(std::string("\x00\x03\x00\x00\x00\x80", 6)), std::string::npos);
}

TEST_F(Fixture, UnaryCallGetsHeadersDataAndTrailers) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Echo")) + frame(kData, 1, 1, grpc("ping")));
  ASSERT_EQ(services.received, std::vector<std::string>{"ping"});
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1, 0);
  const Frame* d = find(fs, kData, 1);
  const Frame* t = find(fs, kHeaders, 1, 1);
  ASSERT_TRUE(h && d && t);
  EXPECT_EQ(h->headers.at(":status"), "200");
  EXPECT_EQ(h->headers.at("content-type"), "application/grpc");
  EXPECT_EQ(d->payload, grpc("ping"));
  EXPECT_EQ(t->headers.at("grpc-status"), "0");
  EXPECT_TRUE(t->flags & 1);  // END_STREAM on the trailers
  EXPECT_TRUE(session->idle());
}

TEST_F(Fixture, MessageSplitAtEveryByteAcrossDataFrames) {
  start();
  const std::string body = grpc("abcdefghij");
  for (size_t split = 0; split <= body.size(); ++split) {
    const uint32_t id = 1 + 2 * static_cast<uint32_t>(split);
    feed(frame(kHeaders, 4, id, requestHeaders("/t.S/Echo")) +
         frame(kData, 0, id, body.substr(0, split)) + frame(kData, 1, id, body.substr(split)));
  }
  EXPECT_EQ(services.received.size(), body.size() + 1);
  for (const auto& r : services.received) EXPECT_EQ(r, "abcdefghij");
  EXPECT_GT(session->stats().gathered_bytes, 0u);
}

// Issue 16: the bytes a session gathers across DATA frames reach /metrics
// (infergate_grpc_gathered_bytes_total), not only the session's own stats.
TEST_F(Fixture, GatheredBytesAreExportedToTheServerMetrics) {
  common::MetricsRegistry registry;
  ServerMetrics metrics(registry, {});
  session = std::make_shared<Http2Session>(transport, services, options, &metrics);
  start();
  const std::string body = grpc("abcdefghij");
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Echo")) + frame(kData, 0, 1, body.substr(0, 7)) +
       frame(kData, 1, 1, body.substr(7)));
  ASSERT_EQ(services.received, std::vector<std::string>{"abcdefghij"});
  EXPECT_EQ(session->stats().gathered_bytes, 10u);
  EXPECT_EQ(metrics.grpcGatheredBytes(), session->stats().gathered_bytes);
  EXPECT_NE(registry.renderPrometheus().find("infergate_grpc_gathered_bytes_total 10"),
            std::string::npos);
}

TEST_F(Fixture, UnknownMethodIsTrailersOnlyUnimplemented) {
  start();
  frames();
  feed(frame(kHeaders, 5, 1, requestHeaders("/t.S/Nope")));
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->flags & 1);
  EXPECT_EQ(h->headers.at("grpc-status"), "12");
  EXPECT_EQ(h->headers.at("grpc-message"), "Method not found: t.S/Nope");
  EXPECT_TRUE(services.received.empty());
}

TEST_F(Fixture, WrongContentTypeIs415) {
  start();
  frames();
  std::string hdrs = literal(":method", "POST") + literal(":scheme", "http") +
                     literal(":path", "/t.S/Echo") + literal(":authority", "x") +
                     literal("content-type", "application/json");
  feed(frame(kHeaders, 5, 1, hdrs));
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at(":status"), "415");
}

// Issue 13: no exception may cross nghttp2's C callbacks. A service that throws (out of memory
// decoding a hostile message) fails its own stream; the connection serves the next call.
TEST_F(Fixture, ServiceExceptionFailsOnlyItsStream) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Throw")) + frame(kData, 1, 1, grpc("x")));
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "8");  // RESOURCE_EXHAUSTED
  EXPECT_EQ(session->stats().service_exceptions, 1u);
  feed(frame(kHeaders, 4, 3, requestHeaders("/t.S/Echo")) + frame(kData, 1, 3, grpc("next")));
  expectOkTrailers(3);
}

// Issue 13: the flood limits are ours, not the linked nghttp2's defaults (burst 1000 there).
TEST_F(Fixture, RapidResetTripsOurLimit) {
  options.stream_reset_burst = 5;
  options.stream_reset_rate = 0;
  restartWithOptions();
  std::string flood;
  for (uint32_t i = 0; i < 10; ++i) {
    const uint32_t id = 1 + 2 * i;
    flood += frame(kHeaders, 4, id, requestHeaders("/t.S/Later")) +
             frame(kRst, 0, id, std::string("\0\0\0\x08", 4));
  }
  feed(flood);
  auto fs = frames();
  const Frame* g = find(fs, kGoaway, 0);
  ASSERT_TRUE(g) << "no GOAWAY after 10 rapid resets with a burst of 5";
  ASSERT_GE(g->payload.size(), 8u);
  EXPECT_EQ(static_cast<uint8_t>(g->payload[7]), 2);  // nghttp2 ends reset floods with INTERNAL_ERROR
  EXPECT_EQ(session->stats().flood_trips, 1u);
}

// RFC 9113 §5.1.1: a client's new stream identifier must be greater than every one it opened.
TEST_F(Fixture, StreamIdentifierGoingDownIsAConnectionError) {
  start();
  frames();
  feed(frame(kHeaders, 4, 5, requestHeaders("/t.S/Later")));
  feed(frame(kHeaders, 5, 3, requestHeaders("/t.S/Echo")));
  auto fs = frames();
  const Frame* g = find(fs, kGoaway, 0);
  ASSERT_TRUE(g) << "stream 3 after stream 5 was not a connection error";
  ASSERT_GE(g->payload.size(), 8u);
  EXPECT_EQ(static_cast<uint8_t>(g->payload[7]), 1);  // PROTOCOL_ERROR
  EXPECT_EQ(find(fs, kHeaders, 3), nullptr);  // never answered
  EXPECT_EQ(session->stats().stream_id_errors, 1u);
}

// ...but a stream that was opened and has ended is not an error to mention again (trailers
// racing our RST_STREAM): nghttp2 ignores it, the connection goes on.
TEST_F(Fixture, HeadersOnAnEndedStreamAreNoConnectionError) {
  start();
  frames();
  // Answered before the client ended its side (refused at its headers): we reset the stream
  // (NO_ERROR) after the answer.
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Nope")));
  feed(frame(kHeaders, 4, 3, requestHeaders("/t.S/Later")));
  auto fs = frames();
  ASSERT_TRUE(find(fs, kRst, 1));
  feed(frame(kHeaders, 5, 1, literal("x-trailer", "1")));  // the client's trailers, racing it
  fs = frames();
  EXPECT_EQ(find(fs, kGoaway, 0), nullptr);
  EXPECT_EQ(session->stats().stream_id_errors, 0u);
  feed(frame(kHeaders, 4, 5, requestHeaders("/t.S/Echo")) + frame(kData, 1, 5, grpc("b")));
  expectOkTrailers(5);
}

// Issue 13: a HEADERS frame without END_STREAM and then silence must not hold a stream (and
// its connection) forever: after stream_timeout_ns it ends with DEADLINE_EXCEEDED and a
// RST_STREAM, and the connection serves the next call.
TEST_F(Fixture, SilentStreamTimesOut) {
  options.stream_timeout_ns = 2'000'000'000;
  restartWithOptions();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Echo")));  // no END_STREAM, no DATA
  advance(1'500'000'000);
  EXPECT_EQ(find(frames(), kHeaders, 1), nullptr);  // not yet
  feed(frame(kData, 0, 1, grpc("partial").substr(0, 6)));  // progress restarts the clock
  advance(1'500'000'000);
  EXPECT_EQ(find(frames(), kHeaders, 1), nullptr);
  advance(1'000'000'000);
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h) << "a silent stream was never ended";
  EXPECT_EQ(h->headers.at("grpc-status"), "4");  // DEADLINE_EXCEEDED
  EXPECT_TRUE(find(fs, kRst, 1));                // the client's side is closed too
  EXPECT_EQ(session->stats().stream_timeouts, 1u);
  EXPECT_TRUE(session->idle());
  EXPECT_FALSE(transport.closed);
  feed(frame(kHeaders, 4, 3, requestHeaders("/t.S/Echo")) + frame(kData, 1, 3, grpc("next")));
  expectOkTrailers(3);
}

// A call waiting for its reply is ours to time out (grpc-timeout), not the client's.
TEST_F(Fixture, StreamWaitingForItsReplyDoesNotTimeOut) {
  options.stream_timeout_ns = 1'000'000'000;
  restartWithOptions();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Later")) + frame(kData, 1, 1, grpc("x")));
  advance(5'000'000'000);
  EXPECT_EQ(session->stats().stream_timeouts, 0u);
  services.later[0].first(std::move(services.later[0].second));
  expectOkTrailers(1);
}

// One message per unary call: a reply that comes before the client half-closes waits for its
// END_STREAM, so a second message still ends the call INTERNAL, however it is framed.
TEST_F(Fixture, UnaryCallsOkWaitsForTheClientsEndSoASecondMessageIsInternal) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Echo")) + frame(kData, 0, 1, grpc("a")));
  auto fs = frames();
  EXPECT_EQ(find(fs, kHeaders, 1, 1), nullptr) << "OK before the client ended its side";
  const std::string second = grpc("b");
  feed(frame(kData, 0, 1, second.substr(0, 2)));
  feed(frame(kData, 1, 1, second.substr(2)));
  fs = frames();
  const Frame* t = find(fs, kHeaders, 1, 0);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->headers.at("grpc-status"), "13");
  EXPECT_EQ(t->headers.at("grpc-message"), "unary call with more than one request message");
  // One message and then the end: OK once the end comes.
  feed(frame(kHeaders, 4, 3, requestHeaders("/t.S/Echo")) + frame(kData, 0, 3, grpc("c")));
  fs = frames();
  ASSERT_TRUE(find(fs, kData, 3));  // the reply goes out...
  EXPECT_EQ(find(fs, kHeaders, 3, 1), nullptr);  // ...its status waits for the end
  feed(frame(kData, 1, 3, ""));
  fs = frames();
  t = find(fs, kHeaders, 3, 0);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->headers.at("grpc-status"), "0");
}

// A reply that arrives after the call's grpc-timeout is DEADLINE_EXCEEDED whatever the model
// said: OK late, or the queue's UNAVAILABLE timeout that clients would retry.
TEST_F(Fixture, AReplyAfterTheDeadlineIsDeadlineExceeded) {
  start();
  frames();
  for (uint32_t id : {1u, 3u}) {
    feed(frame(kHeaders, 4, id,
               requestHeaders("/t.S/Later") + literal("grpc-timeout", "300u")) +
         frame(kData, 1, id, grpc("x")));
  }
  transport.loop_.now += 1'000'000;  // past the deadline, before the session's tick
  GrpcReply unavailable;
  unavailable.code = absl::StatusCode::kUnavailable;
  unavailable.message = "Request timeout expired";
  services.later[0].first(std::move(services.later[0].second));
  services.later[1].first(std::move(unavailable));
  const std::vector<Frame> fs = frames();
  for (uint32_t id : {1u, 3u}) {
    const Frame* t = find(fs, kHeaders, id, 0);
    ASSERT_TRUE(t) << id;
    EXPECT_EQ(t->headers.at("grpc-status"), "4") << id;
  }
  EXPECT_EQ(session->stats().deadline_exceeded, 2u);
}

// A unary request message that trickles (a byte a second, inside the gap timeout) ends at the
// request deadline, counted from its HEADERS.
TEST_F(Fixture, ATricklingUnaryMessageEndsAtTheRequestDeadline) {
  options.stream_timeout_ns = 2'000'000'000;
  options.request_deadline_ns = 6'000'000'000;
  restartWithOptions();
  const std::string m = grpc(std::string(100, 'x'));
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Echo")));
  frames();
  for (int i = 0; i < 5; ++i) {
    feed(frame(kData, 0, 1, m.substr(i, 1)));
    advance(1'000'000'000);
  }
  EXPECT_EQ(find(frames(), kHeaders, 1), nullptr);  // 5 s in: still reading
  feed(frame(kData, 0, 1, m.substr(5, 1)));
  advance(1'100'000'000);
  const auto fs = frames();
  const Frame* t = find(fs, kHeaders, 1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->headers.at("grpc-status"), "4");
  EXPECT_NE(t->headers.at("grpc-message").find("not complete within 6000 ms"), std::string::npos);
}

// A header block left open (HEADERS without END_HEADERS, no CONTINUATION) blocks every other
// frame of the connection: after header_timeout_ns the connection ends with GOAWAY.
TEST_F(Fixture, UnfinishedHeaderBlockEndsTheConnection) {
  options.header_timeout_ns = 1'000'000'000;
  restartWithOptions();
  feed(frame(kHeaders, 0, 1, requestHeaders("/t.S/Echo")));  // END_HEADERS not set
  advance(900'000'000);
  EXPECT_EQ(find(frames(), kGoaway, 0), nullptr);
  advance(200'000'000);
  auto fs = frames();
  const Frame* g = find(fs, kGoaway, 0);
  ASSERT_TRUE(g) << "an unfinished header block held the connection";
  EXPECT_EQ(uint8_t(g->payload[7]), NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_TRUE(transport.closed);
  EXPECT_EQ(session->stats().header_timeouts, 1u);
  EXPECT_EQ(session->stats().flood_trips, 0u);
}

// Issue 13: a client that announces large messages on many streams and sends their bodies as
// fast as flow control lets it must not make one connection buffer without bound. The client
// below obeys flow control exactly (it sends what the windows allow and reads our
// WINDOW_UPDATEs); with nghttp2's automatic window updates every byte would be acknowledged
// as soon as it was gathered, and all 20 MiB would sit in the session.
TEST_F(Fixture, MemoryBudgetWithholdsWindowAndEveryMessageStillCompletes) {
  options.max_connection_memory_bytes = 256 * 1024;
  options.initial_window_bytes = 65535;
  options.connection_window_bytes = 64u << 20;
  session = std::make_shared<Http2Session>(transport, services, options, nullptr);
  start();
  feed(frame(kSettings, 1, 0, ""));  // ACK: our SETTINGS apply
  frames();
  constexpr int kStreams = 20;
  constexpr size_t kMessage = 1u << 20;
  const size_t kFrame = 16384;
  std::map<uint32_t, int64_t> window;  // the client's view of our receive windows
  std::map<uint32_t, size_t> left;     // bytes of each stream still to send
  int64_t conn_window = 64 << 20;
  std::string prefix(5, '\0');
  writeGrpcPrefix(prefix.data(), kMessage);
  for (int i = 0; i < kStreams; ++i) {
    const uint32_t id = 1 + 2 * i;
    feed(frame(kHeaders, 4, id, requestHeaders("/t.S/Later")));
    window[id] = 65535;
    left[id] = kMessage + 5;
  }
  size_t peak = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (auto& [id, n] : left) {
      while (n > 0 && window[id] > 0 && conn_window > 0) {
        const size_t chunk = std::min<size_t>({n, kFrame, size_t(window[id]), size_t(conn_window)});
        const size_t sent = kMessage + 5 - n;
        std::string payload;
        if (sent < 5) {
          payload = prefix.substr(sent, std::min<size_t>(chunk, 5 - sent));
        }
        payload.resize(std::min(chunk, n), 'x');
        feed(frame(kData, n == payload.size() ? 1 : 0, id, payload));
        n -= payload.size();
        window[id] -= int64_t(payload.size());
        conn_window -= int64_t(payload.size());
        progress = true;
        peak = std::max(peak, session->memoryBytes());
      }
    }
    for (const Frame& f : frames()) {
      if (f.type != 8) continue;  // WINDOW_UPDATE
      const uint32_t inc = ((uint8_t(f.payload[0]) & 0x7fu) << 24) | (uint8_t(f.payload[1]) << 16) |
                           (uint8_t(f.payload[2]) << 8) | uint8_t(f.payload[3]);
      if (f.stream == 0) {
        conn_window += inc;
      } else {
        window[f.stream] += inc;
        progress = true;
      }
    }
  }
  // Bound: budget + one message being finished + a stream window per other stream.
  const size_t bound = options.max_connection_memory_bytes + kMessage + 5 + kStreams * 65535;
  EXPECT_LE(peak, bound);
  EXPECT_LE(session->stats().peak_memory_bytes, bound);
  EXPECT_GE(session->stats().window_withheld, 1u);
  // Messages are gathered in turn, none starves: every one reached the service.
  EXPECT_EQ(services.received.size(), size_t(kStreams));
  for (const auto& [id, n] : left) EXPECT_EQ(n, 0u) << "stream " << id << " starved";
  EXPECT_EQ(session->memoryBytes(), 0u);
}

TEST_F(Fixture, TwoMessagesOnAUnaryCallIsInternal) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Later")) +
       frame(kData, 1, 1, grpc("a") + grpc("b")));
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "13");
  services.later[0].first(std::move(services.later[0].second));  // late reply: dropped
  EXPECT_TRUE(frames().empty());
}

TEST_F(Fixture, CompressedMessageIsUnimplemented) {
  start();
  frames();
  std::string body = grpc("zz");
  body[0] = 1;
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Echo", literal("grpc-encoding", "gzip"))) +
       frame(kData, 1, 1, body));
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "12");
}

TEST_F(Fixture, DeadlineExceededThenLateReplyDropped) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Later", literal("grpc-timeout", "100m"))) +
       frame(kData, 1, 1, grpc("x")));
  EXPECT_EQ(services.last_call.timeout_ns, 100'000'000u);
  EXPECT_EQ(services.last_call.deadline_ns, transport.loop_.now + 100'000'000u);
  advance(50'000'000);
  EXPECT_EQ(find(frames(), kHeaders, 1), nullptr);
  advance(60'000'000);
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "4");
  EXPECT_EQ(session->stats().deadline_exceeded, 1u);
  services.later[0].first(std::move(services.later[0].second));
  EXPECT_TRUE(frames().empty());
}

TEST_F(Fixture, RstStreamCancelsAndReplyIsDropped) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Later")) + frame(kData, 1, 1, grpc("x")));
  EXPECT_FALSE(session->idle());
  ASSERT_EQ(services.tokens.size(), 1u);
  ASSERT_NE(services.tokens[0], nullptr);
  EXPECT_FALSE(services.tokens[0]->cancelled());
  feed(frame(kRst, 0, 1, std::string("\0\0\0\x08", 4)));  // CANCEL
  EXPECT_EQ(session->stats().cancelled, 1u);
  EXPECT_TRUE(services.tokens[0]->cancelled());  // the model drops the queued request
  EXPECT_TRUE(session->idle());
  services.later[0].first(std::move(services.later[0].second));
  for (const Frame& f : frames()) EXPECT_NE(f.stream, 1u);
}

TEST_F(Fixture, ReplyFromAnotherThreadIsPosted) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Later")) + frame(kData, 1, 1, grpc("t")));
  std::thread th([&] { services.later[0].first(std::move(services.later[0].second)); });
  th.join();
  EXPECT_TRUE(frames().empty());
  ASSERT_EQ(transport.loop_.posted.size(), 1u);
  transport.loop_.runPosted();
  auto fs = frames();
  const Frame* d = find(fs, kData, 1);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->payload, grpc("t"));
}

TEST_F(Fixture, StreamingCallEchoesEachMessageThenOk) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Stream")) +
       frame(kData, 0, 1, grpc("a") + grpc("b").substr(0, 3)));
  feed(frame(kData, 1, 1, grpc("b").substr(3) + grpc("c")));
  EXPECT_EQ(services.received, (std::vector<std::string>{"a", "b", "c"}));
  auto fs = frames();
  std::string data;
  for (const Frame& f : fs) {
    if (f.type == kData && f.stream == 1) data += f.payload;
  }
  EXPECT_EQ(data, grpc("a") + grpc("b") + grpc("c"));
  const Frame* t = find(fs, kHeaders, 1, 1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->headers.at("grpc-status"), "0");
}

TEST_F(Fixture, BadPrefaceSendsGoawayAndCloses) {
  feed("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  auto fs = frames();
  const Frame* g = find(fs, kGoaway, 0);
  ASSERT_TRUE(g);
  EXPECT_EQ(uint8_t(g->payload[7]), NGHTTP2_PROTOCOL_ERROR);
  EXPECT_TRUE(transport.closed);
  EXPECT_EQ(session->stats().protocol_errors, 1u);
}

TEST_F(Fixture, PingIsAnswered) {
  start();
  frames();
  feed(frame(kPing, 0, 0, "12345678"));
  auto fs = frames();
  const Frame* p = find(fs, kPing, 0);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->flags & 1);
  EXPECT_EQ(p->payload, "12345678");
}

TEST_F(Fixture, ShutdownSendsGoawayAndFinishesInFlight) {
  start();
  frames();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Later")) + frame(kData, 1, 1, grpc("x")));
  session->shutdown();
  auto fs = frames();
  const Frame* g = find(fs, kGoaway, 0);
  ASSERT_TRUE(g);
  EXPECT_EQ(uint8_t(g->payload[3]), 1);  // last stream id 1
  EXPECT_EQ(uint8_t(g->payload[7]), NGHTTP2_NO_ERROR);
  EXPECT_FALSE(transport.closed);
  // A new stream after GOAWAY is refused; the in-flight one completes.
  feed(frame(kHeaders, 4, 3, requestHeaders("/t.S/Echo")) + frame(kData, 1, 3, grpc("y")));
  EXPECT_EQ(services.received.size(), 1u);
  services.later[0].first(std::move(services.later[0].second));
  fs = frames();
  const Frame* t = find(fs, kHeaders, 1, 1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->headers.at("grpc-status"), "0");
  EXPECT_TRUE(transport.closed);
}

TEST_F(Fixture, IdleTimeoutSendsGoawayAndCloses) {
  start();
  frames();
  advance(6'000'000'000);
  auto fs = frames();
  ASSERT_TRUE(find(fs, kGoaway, 0));
  EXPECT_TRUE(transport.closed);
}

}  // namespace
}  // namespace infergate::frontend

namespace infergate::frontend {
namespace {

// Issue 16: a call with a sink gets its message piece by piece, as views into the bytes the
// transport delivered (nothing gathered), at every split of the DATA frames.
TEST_F(Fixture, SinkGetsViewsOfTheDeliveredBytesAtEverySplit) {
  start();
  frames();
  const std::string body = grpc("abcdefghijklmnopqrstuvwxyz");
  uint32_t id = 1;
  for (size_t i = 0; i <= body.size(); ++i) {
    for (size_t j = i; j <= body.size(); j += 3) {
      services.sink_log = SinkLog();
      const std::string wire = frame(kHeaders, 4, id, requestHeaders("/t.S/Sink")) +
                               frame(kData, 0, id, body.substr(0, i)) +
                               frame(kData, 0, id, body.substr(i, j - i)) +
                               frame(kData, 1, id, body.substr(j));
      feed(wire);
      const SinkLog& log = services.sink_log;
      // A message inside one DATA frame is handed to call() as a view; a split one to the sink.
      const bool whole = i == body.size() || (i == 0 && (j == 0 || j == body.size()));
      if (whole) {
        ASSERT_FALSE(services.received.empty());
        EXPECT_EQ(services.received.back(), "abcdefghijklmnopqrstuvwxyz");
        EXPECT_TRUE(log.begins.empty());
      } else {
        ASSERT_EQ(log.begins, std::vector<uint32_t>{26}) << i << "," << j;
        EXPECT_EQ(log.bytes, "abcdefghijklmnopqrstuvwxyz");
        EXPECT_EQ(log.ends, 1);
      }
      for (const auto& [p, n] : log.pieces) {
        EXPECT_GE(p, wire.data());  // a view of the fed bytes, not a copy
        EXPECT_LE(p + n, wire.data() + wire.size());
      }
      for (bool c : log.copied) EXPECT_FALSE(c);
      const std::vector<Frame> fs = frames();
      const Frame* d = find(fs, kData, id);
      ASSERT_TRUE(d);
      EXPECT_EQ(d->payload, body);
      id += 2;
    }
  }
  EXPECT_EQ(session->stats().gathered_bytes, 0u);
  EXPECT_EQ(services.received.size(), 2u);  // the whole ones: (0, 0) and (31, 31)
}

TEST_F(Fixture, SinkPiecesCarryTheTransportsCopyFlag) {
  start();
  frames();
  const std::string body = grpc("0123456789");
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Sink")) + frame(kData, 0, 1, body.substr(0, 8)));
  transport.copying = true;
  feed(frame(kData, 1, 1, body.substr(8)));
  transport.copying = false;
  ASSERT_EQ(services.sink_log.copied.size(), 2u);
  EXPECT_FALSE(services.sink_log.copied[0]);
  EXPECT_TRUE(services.sink_log.copied[1]);
  expectOkTrailers(1);
}

// Refused before copying: the sink's status is the answer now, the rest of the message is
// discarded unread, and the connection keeps serving.
TEST_F(Fixture, SinkRefusalAnswersAndDiscardsTheRest) {
  start();
  frames();
  services.sink_log.refuse = absl::UnavailableError("queue full");
  const std::string body = grpc(std::string(1000, 'x'));
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Sink")) + frame(kData, 0, 1, body.substr(0, 100)));
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "14");
  EXPECT_EQ(h->headers.at("grpc-message"), "queue full");
  const size_t pieces = services.sink_log.pieces.size();
  feed(frame(kData, 0, 1, body.substr(100, 500)) + frame(kData, 1, 1, body.substr(600)));
  EXPECT_EQ(services.sink_log.pieces.size(), pieces);  // nothing more handed over
  EXPECT_EQ(services.sink_log.ends, 0);
  feed(frame(kHeaders, 4, 3, requestHeaders("/t.S/Echo")) + frame(kData, 1, 3, grpc("next")));
  EXPECT_EQ(services.received, std::vector<std::string>{"next"});
  expectOkTrailers(3);
  EXPECT_EQ(session->stats().window_withheld, 0u);
}

// The deadline passes while the message is still arriving: refused at the next DATA, before
// its bytes reach the sink.
TEST_F(Fixture, DeadlinePassedMidMessageIsRefusedBeforeCopying) {
  start();
  frames();
  const std::string body = grpc(std::string(100, 'y'));
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Sink", literal("grpc-timeout", "100m"))) +
       frame(kData, 0, 1, body.substr(0, 50)));
  const size_t pieces = services.sink_log.pieces.size();
  transport.loop_.now += 150'000'000;  // no tick in between
  feed(frame(kData, 1, 1, body.substr(50)));
  EXPECT_EQ(services.sink_log.pieces.size(), pieces);
  EXPECT_EQ(services.sink_log.ends, 0);
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "4");
  EXPECT_EQ(session->stats().deadline_exceeded, 1u);
}

TEST_F(Fixture, SinkMessageOverTheLimitIsRefusedBeforeItsBytes) {
  options.max_message_bytes = 64;
  restartWithOptions();
  feed(frame(kHeaders, 4, 1, requestHeaders("/t.S/Sink")) +
       frame(kData, 1, 1, grpc(std::string(65, 'z'))));
  EXPECT_TRUE(services.sink_log.begins.empty());
  EXPECT_TRUE(services.sink_log.pieces.empty());
  auto fs = frames();
  const Frame* h = find(fs, kHeaders, 1);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->headers.at("grpc-status"), "8");
}

}  // namespace
}  // namespace infergate::frontend
