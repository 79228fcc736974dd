// Issue 19: Retry-After on the wire and tenant limits in the sessions. HTTP/1.1: a refusal's
// `Retry-After` header, tenants counted when a POST's headers are complete (the body of a
// refused request is never handed to the handler), the in-flight place released with the
// answer, the tenant's default class on the request's tag. HTTP/2 gRPC: `retry-after` and
// `grpc-retry-pushback-ms` in the Trailers-Only answer, tenants by the api-key metadata.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/retry_after.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "frontend/http1_session.h"
#include "frontend/http2_session.h"
#include "frontend/status_map.h"
#include "frontend/tenants.h"
#include "tests/mocks/fake_transport.h"
#include "tests/unit/frontend/h2_frames.h"

namespace infergate::frontend {
namespace {

TEST(RetryAfterMapping, HttpErrorResponseCarriesTheHeader) {
  HttpResponse r = httpErrorResponse(
      backends::withRetryAfter(absl::UnavailableError("Exceeds maximum queue size"), 7));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "{\"error\":\"Exceeds maximum queue size\"}");
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].name, "Retry-After");
  EXPECT_EQ(r.headers[0].value, "7");
  std::string wire;
  serializeResponse(r, true, wire);
  EXPECT_NE(wire.find("HTTP/1.1 503 Service Unavailable\r\n"), std::string::npos) << wire;
  EXPECT_NE(wire.find("\r\nRetry-After: 7\r\n"), std::string::npos) << wire;

  r = httpErrorResponse(backends::withRetryAfter(absl::ResourceExhaustedError("slow down"), 2));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers.at(0).value, "2");
  // No hint, no header.
  r = httpErrorResponse(absl::UnavailableError("Request timeout expired"));
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(r.headers.empty());
  EXPECT_EQ(retryAfterFor(absl::UnavailableError("x")), std::nullopt);
}

std::unique_ptr<TenantLimiter> makeLimiter(common::Clock& clock, common::MetricsRegistry& m,
                                           TenantLimits limits, std::optional<int> cls = {}) {
  TenantsOptions o;
  TenantSpec a;
  a.name = "a";
  a.api_keys = {"key-a"};
  a.sources = {*common::parseCidr("192.0.2.0/24")};
  a.limits = limits;
  a.limits.priority_class = cls;
  o.tenants.push_back(a);
  auto l = TenantLimiter::create(std::move(o), &clock, &m);
  EXPECT_TRUE(l.ok()) << l.status();
  return std::move(*l);
}

TenantLimits limits(double rate, uint64_t burst, uint32_t max_concurrent) {
  TenantLimits l;
  l.rate = rate;
  l.burst = burst;
  l.max_concurrent = max_concurrent;
  return l;
}

// Holds every request; records what reached it.
class HoldingHandler : public HttpHandler {
 public:
  void handle(HttpRequest&& req, HttpRespond respond) override {
    bodies.push_back(req.body);
    classes.push_back(req.tag ? std::optional<int>(req.tag->priority_class) : std::nullopt);
    held.push_back(std::move(respond));
  }
  void answer(size_t i) {
    HttpResponse r;
    r.body = "ok";
    held[i](std::move(r));
  }
  std::vector<std::string> bodies;
  std::vector<std::optional<int>> classes;
  std::vector<HttpRespond> held;
};

struct Http1Tenants : ::testing::Test {
  void make(TenantLimits l, std::optional<int> cls = {}) {
    std::unique_ptr<TenantLimiter> owned = makeLimiter(clock, metrics, l, cls);
    limiter = owned.get();
    ASSERT_TRUE(limiters.publish(std::move(owned)).ok());
    options.tenants = &limiters;
    session = std::make_shared<Http1Session>(transport, handler, options, nullptr);
  }
  void feed(std::string_view s) { session->onData(s.data(), s.size()); }
  static std::string post(std::string_view body, std::string_view key = {}) {
    std::string r = "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n";
    if (!key.empty()) r += "X-Api-Key: " + std::string(key) + "\r\n";
    return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
  }
  common::ManualClock clock;
  common::MetricsRegistry metrics;
  TenantLimiters limiters;  // what the sessions read (a reload would publish another)
  TenantLimiter* limiter = nullptr;
  Http1SessionOptions options;
  mocks::FakeTransport transport;
  HoldingHandler handler;
  std::shared_ptr<Http1Session> session;
};

TEST_F(Http1Tenants, OverTheRateIs429WithTheRefillTimeAndTheBodyIsNotRead) {
  make(limits(0.25, 1, 0));  // one per 4 s
  feed(post("first", "key-a"));
  ASSERT_EQ(handler.bodies.size(), 1u);
  handler.answer(0);
  transport.out.clear();
  clock.advanceNs(500'000'000);
  feed(post("second", "key-a"));
  EXPECT_EQ(handler.bodies.size(), 1u);  // never reached the handler
  EXPECT_NE(transport.out.find("HTTP/1.1 429 Too Many Requests\r\n"), std::string::npos)
      << transport.out;
  EXPECT_NE(transport.out.find("\r\nRetry-After: 4\r\n"), std::string::npos) << transport.out;
  EXPECT_NE(transport.out.find("tenant 'a' is over its request rate"), std::string::npos);
  // Another tenant (the default: an unknown key, a source outside 192.0.2.0/24) is not limited.
  transport.out.clear();
  feed(post("third", "someone-else"));
  ASSERT_EQ(handler.bodies.size(), 2u);
  EXPECT_EQ(handler.bodies[1], "third");
}

// A repeated API-key header is refused the same way in both protocols (400 here,
// INVALID_ARGUMENT over HTTP/2): which value counted would otherwise differ by protocol.
TEST_F(Http1Tenants, ARepeatedApiKeyHeaderIsRefused) {
  make(limits(0, 0, 0));
  feed("POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX-Api-Key: someone-else\r\n"
       "X-Api-Key: key-a\r\nContent-Length: 4\r\n\r\nbody");
  EXPECT_TRUE(handler.bodies.empty());
  EXPECT_NE(transport.out.find("HTTP/1.1 400 Bad Request\r\n"), std::string::npos)
      << transport.out;
  EXPECT_NE(transport.out.find("header 'x-api-key' given 2 times"), std::string::npos)
      << transport.out;
  EXPECT_EQ(limiter->inflight(0), 0u);
  transport.out.clear();
  feed(post("once", "key-a"));
  ASSERT_EQ(handler.bodies.size(), 1u);
}

TEST_F(Http1Tenants, SourceCidrTenantAndGetsAreNotCounted) {
  transport.peer = common::parseCidr("192.0.2.9")->addr;
  make(limits(0.25, 1, 0));
  feed("GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n");  // not an inference request
  feed(post("first"));
  feed(post("second"));
  ASSERT_EQ(handler.bodies.size(), 2u);  // the GET and the first POST
  handler.answer(0);
  handler.answer(1);
  EXPECT_NE(transport.out.find("HTTP/1.1 429 Too Many Requests\r\n"), std::string::npos);
  EXPECT_NE(transport.out.find("\r\nRetry-After: 4\r\n"), std::string::npos) << transport.out;
}

TEST_F(Http1Tenants, ConcurrencyCapHoldsUntilTheAnswer) {
  make(limits(0, 0, 1));
  feed(post("one", "key-a"));
  ASSERT_EQ(handler.bodies.size(), 1u);
  EXPECT_EQ(limiter->inflight(1), 1u);
  feed(post("two", "key-a"));  // pipelined behind the held one: refused, answered in order
  EXPECT_EQ(handler.bodies.size(), 1u);
  EXPECT_EQ(transport.out, "");  // waits for the first answer (request order)
  handler.answer(0);
  EXPECT_EQ(limiter->inflight(1), 0u);
  EXPECT_NE(transport.out.find("HTTP/1.1 200 OK\r\n"), std::string::npos);
  EXPECT_NE(transport.out.find("HTTP/1.1 429 Too Many Requests\r\n"), std::string::npos);
  EXPECT_NE(transport.out.find("\r\nRetry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(transport.out.find("has 1 requests in flight"), std::string::npos);
  feed(post("three", "key-a"));
  ASSERT_EQ(handler.bodies.size(), 2u);
  EXPECT_EQ(limiter->inflight(1), 1u);
  session->onClosed();  // the connection goes: its place goes too
  EXPECT_EQ(limiter->inflight(1), 0u);
}

TEST_F(Http1Tenants, TenantClassReplacesTheTagClass) {
  net::IngressTag tag;
  tag.priority_class = 1;
  transport.tag = tag;
  make(limits(0, 0, 0), /*cls=*/3);
  feed(post("x", "key-a"));
  feed(post("y"));  // the default tenant: the tag's class stays
  ASSERT_EQ(handler.classes.size(), 2u);
  EXPECT_EQ(handler.classes[0], 3);
  EXPECT_EQ(handler.classes[1], 1);
}

// --- HTTP/2 gRPC -----------------------------------------------------------------------------

// "/t.S/Infer" is an inference method (limited) that holds its reply; "/t.S/Meta" is not.
class Services : public GrpcServices {
 public:
  GrpcMethod resolve(std::string_view path) const override {
    GrpcMethod m;
    if (path == "/t.S/Infer") {
      m.id = 0;
      m.limited = true;
    }
    if (path == "/t.S/Meta") m.id = 1;
    if (path == "/t.S/Stream") {  // client-streaming inference (ModelStreamInfer)
      m.id = 2;
      m.limited = true;
      m.client_streaming = true;
    }
    return m;
  }
  void call(const GrpcMethod&, GrpcCall& call, std::string_view message,
            GrpcRespond respond) override {
    classes.push_back(call.priority_class);
    held.push_back(std::move(respond));
  }
  std::vector<std::optional<int>> classes;
  std::vector<GrpcRespond> held;
};

using testing::frame;
using testing::literal;
constexpr uint8_t kHeaders = 1, kData = 0, kSettings = 4;

struct Http2Tenants : ::testing::Test {
  Http2Tenants() { nghttp2_hd_inflate_new(&inflater); }
  ~Http2Tenants() override { nghttp2_hd_inflate_del(inflater); }
  void make(TenantLimits l, std::optional<int> cls = {}) {
    std::unique_ptr<TenantLimiter> owned = makeLimiter(clock, metrics, l, cls);
    limiter = owned.get();
    ASSERT_TRUE(limiters.publish(std::move(owned)).ok());
    options.tenants = &limiters;
    session = std::make_shared<Http2Session>(transport, services, options, nullptr);
    feed(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + frame(kSettings, 0, 0, ""));
    headersOf(0);
  }
  void feed(std::string_view s) { session->onData(s.data(), s.size()); }
  void call(uint32_t stream, std::string_view path, std::string_view key = {}) {
    std::string h = literal(":method", "POST") + literal(":scheme", "http") +
                    literal(":path", path) + literal(":authority", "x") +
                    literal("content-type", "application/grpc") + literal("te", "trailers");
    if (!key.empty()) h += literal("x-api-key", key);
    std::string msg;
    appendGrpcMessage(msg, "m");
    feed(frame(kHeaders, 4, stream, h) + frame(kData, 1, stream, msg));
  }
  // The decoded HEADERS frames sent on `stream` so far (all streams' output is consumed).
  std::vector<std::map<std::string, std::string>> headersOf(uint32_t stream) {
    std::vector<std::map<std::string, std::string>> out;
    std::string& o = transport.out;
    size_t pos = 0;
    while (o.size() - pos >= 9) {
      const uint32_t n = (uint8_t(o[pos]) << 16) | (uint8_t(o[pos + 1]) << 8) | uint8_t(o[pos + 2]);
      const uint8_t type = uint8_t(o[pos + 3]);
      const uint32_t id = ((uint8_t(o[pos + 5]) & 0x7f) << 24) | (uint8_t(o[pos + 6]) << 16) |
                          (uint8_t(o[pos + 7]) << 8) | uint8_t(o[pos + 8]);
      if (type == kHeaders) {
        std::map<std::string, std::string> h;
        testing::inflateHeaders(inflater, std::string_view(o).substr(pos + 9, n), h);
        if (id == stream) out.push_back(std::move(h));
      }
      pos += 9 + n;
    }
    o.erase(0, pos);
    return out;
  }
  common::ManualClock clock;
  common::MetricsRegistry metrics;
  TenantLimiters limiters;  // what the sessions read (a reload would publish another)
  TenantLimiter* limiter = nullptr;
  Http2SessionOptions options;
  mocks::FakeTransport transport;
  Services services;
  std::shared_ptr<Http2Session> session;
  nghttp2_hd_inflater* inflater = nullptr;
};

TEST_F(Http2Tenants, OverTheRateIsResourceExhaustedWithTrailingHint) {
  make(limits(0.5, 1, 0));  // one per 2 s
  call(1, "/t.S/Infer", "key-a");
  ASSERT_EQ(services.held.size(), 1u);
  call(3, "/t.S/Infer", "key-a");
  EXPECT_EQ(services.held.size(), 1u);  // refused before its message was read
  const auto h = headersOf(3);
  ASSERT_EQ(h.size(), 1u);  // Trailers-Only
  EXPECT_EQ(h[0].at("grpc-status"), "8");
  EXPECT_EQ(h[0].at("retry-after"), "2");
  EXPECT_EQ(h[0].at("grpc-retry-pushback-ms"), "2000");
  // Not an inference method: not counted.
  call(5, "/t.S/Meta", "key-a");
  EXPECT_EQ(services.held.size(), 2u);
}

TEST_F(Http2Tenants, ARepeatedApiKeyIsInvalidArgument) {
  make(limits(0, 0, 0));
  std::string h = literal(":method", "POST") + literal(":scheme", "http") +
                  literal(":path", "/t.S/Infer") + literal(":authority", "x") +
                  literal("content-type", "application/grpc") + literal("te", "trailers") +
                  literal("x-api-key", "key-a") + literal("x-api-key", "someone-else");
  std::string msg;
  appendGrpcMessage(msg, "m");
  feed(frame(kHeaders, 4, 1, h) + frame(kData, 1, 1, msg));
  EXPECT_TRUE(services.held.empty());
  const auto hs = headersOf(1);
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].at("grpc-status"), "3");
  EXPECT_NE(hs[0].at("grpc-message").find("given 2 times"), std::string::npos);
  call(3, "/t.S/Infer", "key-a");
  EXPECT_EQ(services.held.size(), 1u);
}

TEST_F(Http2Tenants, ConcurrencyCapAndClassAndReplyHints) {
  make(limits(0, 0, 1), /*cls=*/0);
  call(1, "/t.S/Infer", "key-a");
  ASSERT_EQ(services.held.size(), 1u);
  EXPECT_EQ(services.classes[0], 0);
  call(3, "/t.S/Infer", "key-a");
  auto h = headersOf(3);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].at("grpc-status"), "8");
  EXPECT_EQ(h[0].at("retry-after"), "1");
  // The held call fails with a queue refusal carrying a hint: it reaches the trailers too, and
  // the tenant's place is free again.
  GrpcReply r;
  r.code = absl::StatusCode::kUnavailable;
  r.message = "Exceeds maximum queue size";
  r.retry_after_s = 9;
  services.held[0](std::move(r));
  h = headersOf(1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].at("grpc-status"), "14");
  EXPECT_EQ(h[0].at("retry-after"), "9");
  EXPECT_EQ(h[0].at("grpc-retry-pushback-ms"), "9000");
  EXPECT_EQ(limiter->inflight(1), 0u);
  call(5, "/t.S/Infer");  // no key: the default tenant, no class
  ASSERT_EQ(services.classes.size(), 2u);
  EXPECT_EQ(services.classes[1], std::nullopt);
}

TEST_F(Http2Tenants, StreamMessagesSpendTheRateAndOverItTheStreamEnds) {
  make(limits(0.5, 2, 0));  // one per 2 s, burst 2
  std::string h = literal(":method", "POST") + literal(":scheme", "http") +
                  literal(":path", "/t.S/Stream") + literal(":authority", "x") +
                  literal("content-type", "application/grpc") + literal("te", "trailers") +
                  literal("x-api-key", "key-a");
  std::string msgs;
  for (int i = 0; i < 3; ++i) appendGrpcMessage(msgs, "m");
  feed(frame(kHeaders, 4, 1, h) + frame(kData, 0, 1, msgs));
  // The call's admission took one token, the second message the other; the third is over.
  EXPECT_EQ(services.held.size(), 2u);
  const auto hs = headersOf(1);
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].at("grpc-status"), "8");
  EXPECT_EQ(hs[0].at("retry-after"), "2");
  EXPECT_EQ(limiter->inflight(1), 0u);  // the stream ended: its place is free
}

}  // namespace
}  // namespace infergate::frontend
