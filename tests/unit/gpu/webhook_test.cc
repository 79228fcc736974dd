#include "gpu/webhook.h"

#include <gtest/gtest.h>

#include <chrono>

#include "tests/unit/gpu/http_test_server.h"

namespace infergate::gpu {
namespace {

using namespace std::chrono_literals;
using testing::HttpTestServer;

TEST(WebhookUrl, Parses) {
  auto u = parseWebhookUrl("http://alerts.example:8080/hooks/gpu?x=1");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "alerts.example");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path, "/hooks/gpu?x=1");
  EXPECT_EQ(u->hostHeader(), "alerts.example:8080");

  u = parseWebhookUrl("http://10.0.0.1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/");

  u = parseWebhookUrl("http://[::1]:9000/h#frag");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  EXPECT_EQ(u->path, "/h");
  EXPECT_EQ(u->hostHeader(), "[::1]:9000");

  u = parseWebhookUrl("http://h?q=1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->path, "/?q=1");
}

TEST(WebhookUrl, RejectsWithAReason) {
  const struct {
    const char* url;
    const char* says;
  } cases[] = {
      {"https://h/x", "https is not supported"},
      {"ftp://h/x", "expected http://"},
      {"h:80/x", "expected http://"},
      {"http:///x", "no host"},
      {"http://:80/x", "no host"},
      {"http://h:0/x", "bad port"},
      {"http://h:65536/x", "bad port"},
      {"http://h:8a/x", "bad port"},
      {"http://h:/x", "empty port"},
      {"http://u:p@h/x", "user info"},
      {"http://h/a b", "spaces or control"},
      {"http://h/a\r\nX: y", "spaces or control"},
      {"http://[::1/x", "unclosed"},
  };
  for (const auto& c : cases) {
    auto u = parseWebhookUrl(c.url);
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument) << c.url;
    EXPECT_NE(u.status().message().find(c.says), std::string::npos) << c.url << ": " << u.status();
  }
  EXPECT_FALSE(WebhookSender::create("https://h/x", 100).ok());
}

TEST(WebhookSender, PostsTheBodyAndCountsA2xx) {
  HttpTestServer server(200);
  auto sender = WebhookSender::create(server.url("/gpu/alert"), 2000);
  ASSERT_TRUE(sender.ok()) << sender.status();
  const std::string body = R"({"detector":"leak","pid":42})";
  EXPECT_TRUE((*sender)->send(body));
  ASSERT_TRUE((*sender)->waitIdle(5s));
  EXPECT_EQ((*sender)->sent(), 1u);
  EXPECT_EQ((*sender)->failed(), 0u);
  EXPECT_EQ((*sender)->dropped(), 0u);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].head.substr(0, reqs[0].head.find("\r\n")), "POST /gpu/alert HTTP/1.1");
  EXPECT_NE(reqs[0].head.find("\r\nHost: 127.0.0.1:" + std::to_string(server.port())), std::string::npos);
  EXPECT_NE(reqs[0].head.find("\r\nContent-Type: application/json"), std::string::npos);
  EXPECT_NE(reqs[0].head.find("\r\nContent-Length: " + std::to_string(body.size())), std::string::npos);
  EXPECT_EQ(reqs[0].body, body);
}

TEST(WebhookSender, A500IsAFailure) {
  HttpTestServer server(500);
  auto sender = WebhookSender::create(server.url(), 2000);
  ASSERT_TRUE(sender.ok());
  (*sender)->send("{}");
  (*sender)->send("{}");
  ASSERT_TRUE((*sender)->waitIdle(5s));
  EXPECT_EQ((*sender)->sent(), 0u);
  EXPECT_EQ((*sender)->failed(), 2u);
  EXPECT_EQ(server.requests().size(), 2u);
  auto s = WebhookSender::post(*parseWebhookUrl(server.url()), "{}", 2000);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("500"), std::string::npos) << s;
}

TEST(WebhookSender, ARefusedConnectionIsAFailure) {
  uint16_t port;
  {
    HttpTestServer server(200);
    port = server.port();
  }  // closed: nothing listens on the port now
  auto sender = WebhookSender::create("http://127.0.0.1:" + std::to_string(port) + "/x", 1000);
  ASSERT_TRUE(sender.ok());
  (*sender)->send("{}");
  ASSERT_TRUE((*sender)->waitIdle(5s));
  EXPECT_EQ((*sender)->failed(), 1u);
  EXPECT_EQ((*sender)->sent(), 0u);
}

TEST(WebhookSender, NoAnswerTimesOut) {
  HttpTestServer server(0);  // reads, never answers
  const auto start = std::chrono::steady_clock::now();
  auto s = WebhookSender::post(*parseWebhookUrl(server.url()), "{}", 200);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 3s);
}

TEST(WebhookSender, AFullQueueDropsAndCounts) {
  HttpTestServer server(0);  // holds the first request until stopped
  auto sender_or = WebhookSender::create(server.url(), 30000);
  ASSERT_TRUE(sender_or.ok());
  auto sender = *std::move(sender_or);
  EXPECT_TRUE(sender->send("{\"n\":0}"));
  ASSERT_TRUE(server.waitAccepted(1, 5s));  // in flight: the queue is empty again
  for (size_t i = 0; i < WebhookSender::kQueueMax; ++i) EXPECT_TRUE(sender->send("{}")) << i;
  EXPECT_FALSE(sender->send("{}"));
  EXPECT_FALSE(sender->send("{}"));
  EXPECT_FALSE(sender->send("{}"));
  EXPECT_EQ(sender->dropped(), 3u);
  server.stop();  // closes the held connection: the exchange in flight fails at once
  sender.reset();  // abandons the 64 queued
}

}  // namespace
}  // namespace infergate::gpu
