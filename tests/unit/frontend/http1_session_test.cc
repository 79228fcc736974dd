// Http1Session over a fake transport and loop: responses in request order whichever thread
// answers, errors close the stream, Expect: 100-continue, timeouts, back-pressure.
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <new>
#include <stdexcept>
#include <thread>

#include "tests/mocks/fake_transport.h"
#include "frontend/http1_session.h"

namespace infergate::frontend {
namespace {

using mocks::FakeLoop;
using mocks::FakeTransport;

// Answers "/now/X" inline with body X, and "/later/X" only when release() is called.
class ScriptedHandler : public HttpHandler {
 public:
  void handle(HttpRequest&& req, HttpRespond respond) override {
    std::string_view p = req.path();
    HttpResponse r;
    r.content_type = "text/plain";
    if (p.rfind("/throw/", 0) == 0) {
      if (p == "/throw/oom") throw std::bad_alloc();
      throw std::runtime_error("handler bug");
    }
    if (p.rfind("/now/", 0) == 0) {
      r.body = std::string(p.substr(5));
      respond(std::move(r));
    } else {
      r.body = std::string(p.substr(7));
      later.emplace_back(std::move(respond), std::move(r));
    }
  }
  void release(size_t i) {
    auto& [respond, r] = later[i];
    respond(std::move(r));
  }
  std::vector<std::pair<HttpRespond, HttpResponse>> later;
};

struct Fixture : ::testing::Test {
  Fixture() {
    options.header_timeout_ns = 1'000'000'000;
    options.idle_timeout_ns = 5'000'000'000;
    session = std::make_shared<Http1Session>(transport, handler, options, nullptr);
  }
  void feed(std::string_view s) { session->onData(s.data(), s.size()); }
  static std::string get(std::string_view path) {
    return "GET " + std::string(path) + " HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  // The bodies of the responses in transport.out, in order.
  std::vector<std::string> bodies() const {
    std::vector<std::string> b;
    size_t pos = 0;
    const std::string& o = transport.out;
    while ((pos = o.find("Content-Length: ", pos)) != std::string::npos) {
      const size_t len = std::stoul(o.substr(pos + 16));
      const size_t start = o.find("\r\n\r\n", pos) + 4;
      b.push_back(o.substr(start, len));
      pos = start + len;
    }
    return b;
  }
  Http1SessionOptions options;
  FakeTransport transport;
  ScriptedHandler handler;
  std::shared_ptr<Http1Session> session;
};

TEST_F(Fixture, PipelinedResponsesStayInOrder) {
  feed(get("/later/a") + get("/now/b") + get("/later/c") + get("/now/d"));
  EXPECT_EQ(transport.out, "");  // /later/a blocks everything behind it
  handler.release(1);            // c before a
  EXPECT_EQ(transport.out, "");
  handler.release(0);
  EXPECT_EQ(bodies(), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_FALSE(transport.closed);
}

// Issue 13, item 4: max_in_flight holds within one read. 200 pipelined requests in one
// segment used to reach the handler all at once.
// Issue 13: a handler that throws (bad_alloc decoding a hostile body) fails its own request
// (503, or 500 for anything else), in order; the connection goes on.
TEST_F(Fixture, HandlerExceptionFailsOnlyItsRequest) {
  feed(get("/now/a") + get("/throw/oom") + get("/throw/bug") + get("/now/b"));
  EXPECT_EQ(bodies(), (std::vector<std::string>{
                          "a", R"({"error":"out of memory for this request"})",
                          R"({"error":"internal error: handler bug"})", "b"}));
  EXPECT_NE(transport.out.find("HTTP/1.1 503"), std::string::npos);
  EXPECT_NE(transport.out.find("HTTP/1.1 500"), std::string::npos);
  EXPECT_EQ(session->handlerExceptions(), 2u);
  EXPECT_FALSE(transport.closed);
}

TEST_F(Fixture, PipelinedRequestsInOneReadRespectMaxInFlight) {
  options.max_in_flight = 4;
  session = std::make_shared<Http1Session>(transport, handler, options, nullptr);
  std::string burst;
  for (int i = 0; i < 200; ++i) burst += get("/later/" + std::to_string(i));
  burst += "BAD REQUEST LINE\r\n\r\n";
  feed(burst);
  EXPECT_EQ(handler.later.size(), 4u);
  EXPECT_TRUE(transport.paused);
  for (size_t i = 0; i < 200; ++i) {
    ASSERT_LT(i, handler.later.size());
    handler.release(i);
    EXPECT_LE(handler.later.size() - (i + 1), 4u);  // never more than 4 unanswered
  }
  const std::vector<std::string> b = bodies();
  ASSERT_EQ(b.size(), 201u);  // 200 answers in order, then the parse error's
  for (int i = 0; i < 200; ++i) EXPECT_EQ(b[i], std::to_string(i));
  const size_t last = transport.out.rfind("HTTP/1.1 ");
  ASSERT_NE(last, std::string::npos);
  EXPECT_NE(transport.out.substr(last + 9, 1), "2") << transport.out.substr(last, 40);  // an error
  EXPECT_TRUE(transport.closed);
}

// Requests answered inline while the rest wait: dispatched iteratively, not by recursion.
TEST_F(Fixture, ManyPipelinedInlineAnswersInOneRead) {
  options.max_in_flight = 2;
  session = std::make_shared<Http1Session>(transport, handler, options, nullptr);
  std::string burst;
  for (int i = 0; i < 5000; ++i) burst += get("/now/" + std::to_string(i % 10));
  feed(burst);
  EXPECT_EQ(bodies().size(), 5000u);
  EXPECT_FALSE(transport.paused);
}

TEST_F(Fixture, ResponseFromAnotherThreadIsPostedToTheLoop) {
  feed(get("/later/x"));
  std::thread t([&] { handler.release(0); });
  t.join();
  EXPECT_EQ(transport.out, "");
  ASSERT_EQ(transport.loop_.posted.size(), 1u);
  transport.loop_.runPosted();
  EXPECT_EQ(bodies(), (std::vector<std::string>{"x"}));
}

TEST_F(Fixture, LateResponseAfterCloseIsDropped) {
  feed(get("/later/x"));
  session->onClosed();
  handler.release(0);
  EXPECT_EQ(transport.out, "");
}

TEST_F(Fixture, MalformedRequestAfterGoodOnesAnswersInOrderThenCloses) {
  feed(get("/later/a") + "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nz");
  EXPECT_EQ(transport.out, "");
  EXPECT_FALSE(transport.closed);
  handler.release(0);
  const auto b = bodies();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], "a");
  EXPECT_NE(b[1].find("\"error\""), std::string::npos);
  EXPECT_NE(transport.out.find("HTTP/1.1 400 Bad Request"), std::string::npos);
  EXPECT_NE(transport.out.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(transport.closed);
  transport.out.clear();
  feed(get("/now/ignored"));
  EXPECT_EQ(transport.out, "");
}

TEST_F(Fixture, ExpectContinue) {
  feed("POST /now/p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  EXPECT_EQ(transport.out, "HTTP/1.1 100 Continue\r\n\r\n");
  feed("abc");
  EXPECT_NE(transport.out.find("HTTP/1.1 200 OK"), std::string::npos);
}

TEST_F(Fixture, HeaderTimeoutAnswers408AndCloses) {
  feed("GET /now/a HTTP/1.1\r\nHo");
  transport.loop_.now += 500'000'000;
  session->onTick(transport.loop_.now);
  EXPECT_EQ(transport.out, "");
  transport.loop_.now += 600'000'000;
  session->onTick(transport.loop_.now);
  EXPECT_NE(transport.out.find("HTTP/1.1 408 Request Timeout"), std::string::npos);
  EXPECT_TRUE(transport.closed);
}

TEST_F(Fixture, IdleTimeoutClosesSilently) {
  feed(get("/now/a"));
  transport.out.clear();
  transport.loop_.now += 4'000'000'000;
  session->onTick(transport.loop_.now);
  EXPECT_FALSE(transport.closed);
  transport.loop_.now += 2'000'000'000;
  session->onTick(transport.loop_.now);
  EXPECT_TRUE(transport.closed);
  EXPECT_EQ(transport.out, "");
}

TEST_F(Fixture, InFlightRequestIsNotIdle) {
  feed(get("/later/a"));
  EXPECT_FALSE(session->idle());
  transport.loop_.now += 10'000'000'000;
  session->onTick(transport.loop_.now);
  EXPECT_FALSE(transport.closed);  // waiting on the backend is not idleness
  handler.release(0);
  EXPECT_TRUE(session->idle());
}

TEST_F(Fixture, PeerHalfCloseStillGetsTheResponse) {
  feed(get("/later/a"));
  session->onPeerClosed();
  EXPECT_FALSE(transport.closed);
  handler.release(0);
  EXPECT_EQ(bodies(), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(transport.closed);
}

TEST_F(Fixture, TooManyInFlightPausesReading) {
  std::string many;
  for (size_t i = 0; i < options.max_in_flight; ++i) many += get("/later/x");
  feed(many);
  EXPECT_TRUE(transport.paused);
  handler.release(0);
  EXPECT_FALSE(transport.paused);
}

TEST_F(Fixture, ConnectionCloseStopsParsing) {
  feed("GET /now/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + get("/now/b"));
  EXPECT_EQ(bodies(), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(transport.closed);
}

// A handler that keeps each request's cancel token (HttpRequest::cancel) and answers later.
class TokenHandler : public HttpHandler {
 public:
  void handle(HttpRequest&& req, HttpRespond respond) override {
    std::shared_ptr<net::CancelToken> cancel = std::move(req.cancel);
    HttpResponse r;
    r.body = std::string(req.path());
    if (cancel) cancel->onCancel([this, n = tokens.size()] { cancelled.push_back(n); });
    tokens.push_back(std::move(cancel));
    later.emplace_back(std::move(respond), std::move(r));
  }
  std::vector<std::shared_ptr<net::CancelToken>> tokens;
  std::vector<std::pair<HttpRespond, HttpResponse>> later;
  std::vector<size_t> cancelled;
};

struct CancelFixture : ::testing::Test {
  void start() { session = std::make_shared<Http1Session>(transport, handler, options, nullptr); }
  void feed(std::string_view s) { session->onData(s.data(), s.size()); }
  Http1SessionOptions options;
  FakeTransport transport;
  TokenHandler handler;
  std::shared_ptr<Http1Session> session;
};

TEST_F(CancelFixture, ConnectionLostCancelsOnlyUnansweredRequests) {
  start();
  feed("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(handler.tokens.size(), 2u);
  ASSERT_NE(handler.tokens[0], nullptr);
  auto& [respond, r] = handler.later[0];
  respond(std::move(r));  // /a answered (waiting to be sent? no: first in line, sent)
  session->onClosed();    // reset / closed before /b was answered
  EXPECT_EQ(handler.cancelled, (std::vector<size_t>{1}));
  EXPECT_FALSE(handler.tokens[0]->cancelled());
  EXPECT_TRUE(handler.tokens[1]->cancelled());
  auto& [respond_b, rb] = handler.later[1];
  respond_b(std::move(rb));  // a late (CANCELLED) answer is dropped
}

TEST_F(CancelFixture, HalfCloseKeepsRequestsUnlessConfigured) {
  start();
  feed("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  session->onPeerClosed();
  EXPECT_TRUE(handler.cancelled.empty());  // the client may still read the answer
  auto& [respond, r] = handler.later[0];
  respond(std::move(r));
  EXPECT_NE(transport.out.find("200 OK"), std::string::npos);
}

TEST_F(CancelFixture, HalfCloseCancelsWhenConfigured) {
  options.cancel_on_peer_close = true;
  start();
  feed("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  session->onPeerClosed();
  EXPECT_EQ(handler.cancelled, (std::vector<size_t>{0}));
}

}  // namespace
}  // namespace infergate::frontend
