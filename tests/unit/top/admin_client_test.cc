// app/admin_client.h: the admin listener's client (`infergate top`, `infergate gpu`) against a
// loopback peer that answers with fixed bytes: Content-Length honoured, a short body, chunked
// coding and non-HTTP refused, a body over the limit refused rather than truncated, the
// deadline over the whole exchange.
#include "app/admin_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace infergate::app {
namespace {

// Accepts one connection, reads the request, writes `reply` (then waits `hold_ms` before
// closing).
class OneShotPeer {
 public:
  explicit OneShotPeer(std::string reply, int hold_ms = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, reply = std::move(reply), hold_ms] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)!recv(c, buf, sizeof buf, 0);
      size_t done = 0;
      while (done < reply.size()) {
        const ssize_t n = send(c, reply.data() + done, reply.size() - done, MSG_NOSIGNAL);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      close(c);
    });
  }
  ~OneShotPeer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  std::string admin() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST(AdminClient, ContentLengthBodyAndStatus) {
  OneShotPeer peer("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 5\r\n\r\nhello");
  absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
}

TEST(AdminClient, BodyToTheCloseWithoutContentLength) {
  OneShotPeer peer("HTTP/1.0 404 Not Found\r\n\r\nno such route");
  absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/admin/gpu");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 404);  // not an error here: the caller says what a 404 means
  EXPECT_EQ(r->body, "no such route");
}

TEST(AdminClient, ShortBodyIsAnError) {
  OneShotPeer peer("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello");
  absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ended after 5 of 10 body bytes"), std::string::npos)
      << r.status();
}

TEST(AdminClient, ChunkedIsRefused) {
  OneShotPeer peer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Transfer-Encoding 'chunked' is not supported"),
            std::string::npos)
      << r.status();
}

TEST(AdminClient, NotHttpIsRefused) {
  for (const char* reply : {"SSH-2.0-OpenSSH_9.2\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                            "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx"}) {
    OneShotPeer peer(reply);
    absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics");
    EXPECT_FALSE(r.ok()) << reply;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << reply;
  }
}

TEST(AdminClient, OversizedBodyIsRefusedNotTruncated) {
  AdminGetOptions o;
  o.max_body_bytes = 8;
  {
    OneShotPeer peer("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n123456789");
    absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics", o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  }
  {
    OneShotPeer peer("HTTP/1.1 200 OK\r\n\r\n123456789");  // no length, to the close
    absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics", o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  }
  {
    OneShotPeer peer("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n12345678");  // at the limit
    absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics", o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "12345678");
  }
}

TEST(AdminClient, DeadlineCoversTheWholeExchange) {
  // The peer sends its head and then holds the connection open without a body end.
  OneShotPeer peer("HTTP/1.1 200 OK\r\n", 700);
  AdminGetOptions o;
  o.timeout_ms = 300;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<AdminResponse> r = adminGet(peer.admin(), "/metrics", o);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no complete response within 300 ms"), std::string::npos)
      << r.status();
  EXPECT_GE(ms, 290);
  EXPECT_LT(ms, 650);
}

TEST(AdminClient, BadAddress) {
  EXPECT_EQ(adminGet("no-port", "/metrics").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adminGet(":8002", "/metrics").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adminGet("127.0.0.1:", "/metrics").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace infergate::app
