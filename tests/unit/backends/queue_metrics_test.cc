// The queue-depth scrape: the Prometheus text parser on Triton-format pages
// (backends/prometheus_text.h), URL parsing and the blocking HTTP/1.1 GET against a tiny server
// on loopback (backends/http_client.h: content-length, chunked and close-delimited bodies, error
// statuses, truncation, caps, refused connections, timeouts), and the Triton queue-depth source
// (backends/queue_metrics.h).
#include "backends/http_client.h"
#include "backends/prometheus_text.h"
#include "backends/queue_metrics.h"
#include "tests/unit/backends/test_util.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace infergate::backends {
namespace {

using ::testing::HasSubstr;

// --- Prometheus text ----------------------------------------------------------------------------

// The shape of Triton's /metrics page (r24.x): HELP/TYPE comments, several models and versions,
// GPU metrics with other labels, unlabelled samples, a NaN.
constexpr std::string_view kTritonPage = R"(# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="resnet",version="1"} 420
nv_inference_request_success{model="densenet",version="1"} 7
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="resnet",version="1"} 3
nv_inference_pending_request_count{model="resnet",version="2"} 4
nv_inference_pending_request_count{model="densenet",version="1"} 100
nv_inference_pending_request_count{model="res\"net\\x",version="1"} 1000
nv_inference_pending_request_count{version="7", model="ordered"} 2.5e1
nv_inference_pending_request_count{model="nan_model",version="1"} NaN
nv_inference_pending_request_count{model="multi\nline",version="1",} 9 1712345678000
nv_inference_pending_request_count{model="a,b}c=d",version="1"} 11
nv_inference_pending_request_count_total{model="resnet",version="1"} 5000
nv_inference_pending_request_count_x{model="resnet"} 6000
other_pending{model_name="resnet"} 7000
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-7c3e6a2f-1b2c-4d5e-8f90-123456789abc"} 0.23
nv_cpu_memory_total_bytes 67108864000
nv_inference_queue_duration_us{model="resnet",version="1"} +Inf
)";

std::optional<double> pending(std::string_view text, const std::string& model,
                              const std::string& version = "") {
  std::vector<std::pair<std::string, std::string>> match = {{"model", model}};
  if (!version.empty()) match.emplace_back("version", version);
  absl::StatusOr<std::optional<double>> r = sumMetricSamples(text, kTritonPendingMetric, match);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::nullopt;
}

TEST(PrometheusText, SumsTheModelsSamplesOverVersions) {
  EXPECT_EQ(pending(kTritonPage, "resnet"), 7.0);       // versions 1 and 2, not the _total
  EXPECT_EQ(pending(kTritonPage, "resnet", "2"), 4.0);  // the configured version only
  EXPECT_EQ(pending(kTritonPage, "densenet"), 100.0);
  EXPECT_EQ(pending(kTritonPage, "ordered"), 25.0);     // label order and spaces do not matter
  EXPECT_EQ(pending(kTritonPage, "res\"net\\x"), 1000.0);  // escaped quote and backslash
  EXPECT_EQ(pending(kTritonPage, "multi\nline"), 9.0);     // \n escape, trailing comma, timestamp
  EXPECT_EQ(pending(kTritonPage, "a,b}c=d"), 11.0);        // separators inside a quoted value
}

TEST(PrometheusText, MissingModelOrNaNIsNoReading) {
  EXPECT_EQ(pending(kTritonPage, "inception"), std::nullopt);
  EXPECT_EQ(pending(kTritonPage, "resnet", "3"), std::nullopt);
  EXPECT_EQ(pending(kTritonPage, "nan_model"), std::nullopt);
  EXPECT_EQ(pending("", "resnet"), std::nullopt);
  EXPECT_EQ(pending("# only comments\n\n", "resnet"), std::nullopt);
  // A page without the metric at all (a server that is not Triton).
  EXPECT_EQ(pending("up 1\nprocess_cpu_seconds_total 12.5\n", "resnet"), std::nullopt);
}

TEST(PrometheusText, CrLfAndUnlabelledSamples) {
  EXPECT_EQ(pending("nv_inference_pending_request_count{model=\"m\"} 2\r\n"
                    "nv_inference_pending_request_count{model=\"m\",version=\"9\"} -0\r\n",
                    "m"),
            2.0);
  absl::StatusOr<std::optional<double>> r =
      sumMetricSamples("nv_cpu_memory_total_bytes 64\nnv_cpu_memory_total_bytes 1e3\n",
                       "nv_cpu_memory_total_bytes", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 1064.0);
}

TEST(PrometheusText, MalformedLinesAreErrorsNamingTheLine) {
  const std::vector<std::string> bad = {
      "nv_inference_pending_request_count{model=\"resnet\" 3",        // unclosed label set
      "nv_inference_pending_request_count{model=\"resnet} 3",         // unterminated value
      "nv_inference_pending_request_count{model=\"a\\q\"} 3",         // unknown escape
      "nv_inference_pending_request_count{model=resnet} 3",           // unquoted value
      "nv_inference_pending_request_count{=\"x\"} 3",                 // no label name
      "nv_inference_pending_request_count{model=\"resnet\"} three",   // not a number
      "nv_inference_pending_request_count{model=\"resnet\"}",         // no value
      "nv_inference_pending_request_count{model=\"resnet\"} 3 4 5",   // junk after timestamp
      "nv_inference_pending_request_count{model=\"resnet\"} 3 12.5",  // fractional timestamp
      "{model=\"resnet\"} 3",                                          // no metric name
      "9metric 3",                                                     // bad name
      "<html><body>Not Found</body></html>",
  };
  for (const std::string& line : bad) {
    absl::StatusOr<std::optional<double>> r = sumMetricSamples(
        "# TYPE x gauge\nup 1\n" + line + "\n", kTritonPendingMetric, {{"model", "resnet"}});
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("metrics line 3 ")) << line;
  }
}

// --- URLs -----------------------------------------------------------------------------------------

TEST(HttpUrlTest, Parses) {
  absl::StatusOr<HttpUrl> u = parseHttpUrl("http://10.0.0.5:8002/metrics");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 8002);
  EXPECT_EQ(u->path, "/metrics");
  EXPECT_EQ(u->hostPort(), "10.0.0.5:8002");
  u = parseHttpUrl("http://[::1]:8002");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "[::1]");
  EXPECT_EQ(u->path, "/");
  EXPECT_EQ(u->str(), "http://[::1]:8002/");
  u = parseHttpUrl("HTTP://triton-0.triton.svc:8002/metrics?name[]=x");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "triton-0.triton.svc");
  EXPECT_EQ(u->path, "/metrics?name[]=x");
}

TEST(HttpUrlTest, RefusesWhatItCannotFetch) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"https://h:8002/metrics", "only http:// is supported"},
      {"h:8002/metrics", "expected http://host:port/path"},
      {"http://h/metrics", "has no port"},
      {"http://h:0/metrics", "invalid port '0'"},
      {"http://h:65536/metrics", "invalid port '65536'"},
      {"http://h:80x/metrics", "invalid port '80x'"},
      {"http://:8002/metrics", "has no host"},
      {"http://u:p@h:8002/metrics", "user info is not supported"},
      {"http://h:8002/metrics#frag", "no fragment"},
      {"http://h:8002/met rics", "space or control character"},
      {"http://h_!:8002/", "invalid host 'h_!'"},
      {"http://[::1/metrics", "invalid IPv6 host"},
      {"http://[::1]/metrics", "has no port"},
  };
  for (const auto& [url, msg] : bad) {
    absl::StatusOr<HttpUrl> u = parseHttpUrl(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_THAT(std::string(u.status().message()), HasSubstr(msg)) << url;
  }
}

// --- HTTP client against a loopback server -------------------------------------------------------

// Accepts one connection, reads the request head, then writes `pieces` (with `gap_ms` between
// them), then keeps the connection open for `hold_ms` before closing. `accept_conn` false: never
// accepts (the kernel completes the handshake; nothing is ever answered).
class TinyServer {
 public:
  TinyServer(std::vector<std::string> pieces, int gap_ms = 0, int hold_ms = 0,
             bool accept_conn = true)
      : pieces_(std::move(pieces)), gap_ms_(gap_ms), hold_ms_(hold_ms) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (accept_conn) thread_ = std::thread([this] { run(); });
  }
  ~TinyServer() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  HttpUrl url(std::string path = "/metrics") const { return {"127.0.0.1", port_, path}; }
  std::string request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  void run() {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (i > 0 && gap_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms_));
      ::send(c, pieces_[i].data(), pieces_[i].size(), MSG_NOSIGNAL);
    }
    if (hold_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms_));
    ::close(c);
  }

  std::vector<std::string> pieces_;
  int gap_ms_, hold_ms_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::string request_;
};

double elapsedMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HttpGet, ContentLengthAndTheRequestItSends) {
  // The server keeps the connection open after the body: the client must stop at the length.
  TinyServer srv({"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n",
                  "hello", " world"},
                 20, 2000);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<HttpResponse> r = httpGet(srv.url(), 5000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(elapsedMs(t0), 1500);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello world");
  const std::string req = srv.request();
  EXPECT_EQ(req.rfind("GET /metrics HTTP/1.1\r\n", 0), 0u) << req;
  EXPECT_THAT(req, HasSubstr("\r\nHost: 127.0.0.1:"));
  EXPECT_THAT(req, HasSubstr("\r\nConnection: close\r\n"));
}

TEST(HttpGet, Chunked) {
  // Chunks split across writes (the size line too), an extension, a trailer; connection held.
  TinyServer srv({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhel",
                  "lo\r\n", "6\r\n world\r\n1", "0\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n"},
                 20, 2000);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<HttpResponse> r = httpGet(srv.url(), 5000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(elapsedMs(t0), 1500);
  EXPECT_EQ(r->body, "hello world0123456789abcdef");
}

TEST(HttpGet, CloseDelimited) {
  TinyServer srv({"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nup 1\n", "down 0\n"}, 20);
  absl::StatusOr<HttpResponse> r = httpGet(srv.url(), 5000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "up 1\ndown 0\n");
}

TEST(HttpGet, ErrorStatusIsAResponseAndTheSourceRefusesIt) {
  {
    TinyServer srv({"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"});
    absl::StatusOr<HttpResponse> r = httpGet(srv.url("/nope"), 5000);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 404);
    EXPECT_EQ(r->body, "not found");
    EXPECT_EQ(srv.request().rfind("GET /nope HTTP/1.1\r\n", 0), 0u);
  }
  TinyServer srv({"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"});
  auto src = makeTritonQueueDepthSource(srv.url(), "resnet", "", 5000);
  absl::StatusOr<std::optional<double>> d = src->read();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("HTTP status 404"));
}

TEST(HttpGet, SourceReadsTritonPage) {
  const std::string page(kTritonPage);
  TinyServer srv({"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                      std::to_string(page.size()) + "\r\n\r\n",
                  page});
  auto src = makeTritonQueueDepthSource(srv.url(), "resnet", "1", 5000);
  EXPECT_EQ(src->url(), srv.url().str());
  absl::StatusOr<std::optional<double>> d = src->read();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, 3.0);
}

TEST(HttpGet, SlowServerTimesOut) {
  {
    TinyServer srv({}, 0, 0, /*accept_conn=*/false);  // never answers
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<HttpResponse> r = httpGet(srv.url(), 200);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    EXPECT_GE(elapsedMs(t0), 190);
    EXPECT_LT(elapsedMs(t0), 1000);
  }
  // Headers, then a body that trickles in slower than the deadline.
  TinyServer srv({"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nab", "cd", "ef", "gh"}, 150);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<HttpResponse> r = httpGet(srv.url(), 200);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(elapsedMs(t0), 1000);
}

TEST(HttpGet, RefusedConnection) {
  const uint16_t port = test_util::unusedLoopbackPort();  // nothing listens on it now
  ASSERT_NE(port, 0);
  absl::StatusOr<HttpResponse> r = httpGet({"127.0.0.1", port, "/metrics"}, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("Connection refused"));
}

TEST(HttpGet, BadFramingAndCaps) {
  struct Case {
    std::vector<std::string> pieces;
    size_t max_body;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"}, 100, absl::StatusCode::kDataLoss,
       "closed after 5 of 10 body bytes"},
      {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"}, 100,
       absl::StatusCode::kDataLoss, "inside a chunked body"},
      {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"}, 100,
       absl::StatusCode::kDataLoss, "invalid chunk size 'zz'"},
      {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"}, 100,
       absl::StatusCode::kDataLoss, "not followed by CRLF"},
      {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx"}, 100, absl::StatusCode::kDataLoss,
       "unsupported Transfer-Encoding 'gzip'"},
      {{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello"}, 100,
       absl::StatusCode::kDataLoss, "invalid Content-Length"},
      {{"SSH-2.0-OpenSSH_9.2\r\n\r\n"}, 100, absl::StatusCode::kDataLoss,
       "not an HTTP/1.x status line"},
      {{"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n"}, 100,
       absl::StatusCode::kResourceExhausted, "101 bytes is over the 100 byte limit"},
      {{"HTTP/1.1 200 OK\r\n\r\n", std::string(60, 'x'), std::string(60, 'y')}, 100,
       absl::StatusCode::kResourceExhausted, "over 100 bytes"},
      {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'x') +
        "\r\n40\r\n" + std::string(64, 'x') + "\r\n0\r\n\r\n"},
       100, absl::StatusCode::kResourceExhausted, "over 100 bytes"},
      {{"HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'h')}, 100,
       absl::StatusCode::kResourceExhausted, "headers over"},
      {{}, 100, absl::StatusCode::kDataLoss, "without a response"},
  };
  for (const Case& c : cases) {
    TinyServer srv(c.pieces);
    absl::StatusOr<HttpResponse> r = httpGet(srv.url(), 5000, c.max_body);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("GET http://127.0.0.1:"));
  }
}

}  // namespace
}  // namespace infergate::backends
