// AdminHandler's routes: GET built-ins and added GET routes, POST routes (POST /admin/reload),
// and 405 with the right Allow header for the rest; who may call the control routes.
#include "frontend/admin_handler.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <optional>
#include <string>

#include "backends/model.h"
#include "common/metrics.h"

namespace infergate::frontend {
namespace {

const common::IpBytes kLoopback = common::ipv4Bytes(htonl(0x7f000001));  // 127.0.0.1

// One request from `peer` (loopback unless given), with `authorization` when not empty.
HttpResponse call(AdminHandler& h, const std::string& method, const std::string& target,
                  std::optional<common::IpBytes> peer = kLoopback,
                  const std::string& authorization = "") {
  HttpRequest r;
  r.method = method;
  r.target = target;
  r.peer = peer;
  if (!authorization.empty()) r.headers.push_back({"authorization", authorization});
  HttpResponse out;
  out.status = -1;
  h.handle(std::move(r), [&](HttpResponse resp) { out = std::move(resp); });
  return out;
}

std::string allow(const HttpResponse& r) {
  for (const HttpHeader& h : r.headers) {
    if (h.name == "Allow") return h.value;
  }
  return "";
}

TEST(AdminHandler, PostRoutesAnswerPostOnly) {
  common::MetricsRegistry metrics;
  backends::ModelRegistry models;
  AdminHandler h(metrics, models);
  int calls = 0;
  h.addPostRoute("/admin/reload", [&](const HttpRequest& r) {
    ++calls;
    HttpResponse resp;
    resp.status = 409;
    resp.body = r.method;
    return resp;
  });
  HttpResponse r = call(h, "POST", "/admin/reload");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body, "POST");
  EXPECT_EQ(calls, 1);
  // GET of a POST route is not routed to it; POST of anything else is 405.
  EXPECT_EQ(call(h, "GET", "/admin/reload").status, 404);
  r = call(h, "POST", "/metrics");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(allow(r), "GET");
  r = call(h, "PUT", "/admin/reload");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(allow(r), "GET, POST");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(call(h, "GET", "/v2/health/live").status, 200);
}

TEST(AdminHandler, WithoutPostRoutesPostIs405) {
  common::MetricsRegistry metrics;
  backends::ModelRegistry models;
  AdminHandler h(metrics, models);
  HttpResponse r = call(h, "POST", "/admin/reload");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(allow(r), "GET");
}

// The control routes (every /admin/ route, every POST) answer loopback peers, and others only
// with the configured token; /metrics and health answer anyone (scrapers, probes).
TEST(AdminHandler, ControlRoutesAnswerLoopbackPeersOrTheToken) {
  common::MetricsRegistry metrics;
  backends::ModelRegistry models;
  AdminHandler h(metrics, models);
  int reloads = 0;
  h.addPostRoute("/admin/reload", [&](const HttpRequest&) {
    ++reloads;
    return HttpResponse{};
  });
  h.addRoute("/admin/gpu", [](const HttpRequest&) { return HttpResponse{}; });
  const common::IpBytes remote = common::ipv4Bytes(htonl(0x0a000005));  // 10.0.0.5
  common::IpBytes v6_loopback{};
  v6_loopback[15] = 1;
  common::IpBytes v6_remote{};
  v6_remote[0] = 0x20;
  v6_remote[15] = 1;

  EXPECT_EQ(call(h, "POST", "/admin/reload").status, 200);
  EXPECT_EQ(call(h, "POST", "/admin/reload", v6_loopback).status, 200);
  EXPECT_EQ(call(h, "POST", "/admin/reload", common::ipv4Bytes(htonl(0x7f0000fe))).status, 200);
  EXPECT_EQ(reloads, 3);
  // No token configured: others are refused, whatever they present.
  for (const std::optional<common::IpBytes>& peer :
       {std::optional<common::IpBytes>(remote), std::optional<common::IpBytes>(v6_remote),
        std::optional<common::IpBytes>()}) {
    HttpResponse r = call(h, "POST", "/admin/reload", peer, "Bearer anything-at-all-123456");
    EXPECT_EQ(r.status, 403);
    EXPECT_NE(r.body.find("admin.token"), std::string::npos) << r.body;
    EXPECT_EQ(call(h, "GET", "/admin/gpu", peer).status, 403);
    EXPECT_EQ(call(h, "PUT", "/admin/reload", peer).status, 403);
    EXPECT_EQ(call(h, "GET", "/metrics", peer).status, 200);
    EXPECT_EQ(call(h, "GET", "/v2/health/live", peer).status, 200);
  }
  EXPECT_EQ(reloads, 3);
  // With a token: the right bearer token admits them, a wrong or missing one is 401.
  h.setToken("s3cret-token-0123456789");
  EXPECT_EQ(call(h, "POST", "/admin/reload", remote, "Bearer s3cret-token-0123456789").status,
            200);
  EXPECT_EQ(reloads, 4);
  for (const std::string& auth : {std::string(), std::string("Bearer s3cret-token-012345678"),
                                  std::string("Bearer s3cret-token-0123456780"),
                                  std::string("Basic s3cret-token-0123456789"),
                                  std::string("Bearer ")}) {
    HttpResponse r = call(h, "POST", "/admin/reload", remote, auth);
    EXPECT_EQ(r.status, 401) << auth;
    bool challenged = false;
    for (const HttpHeader& hd : r.headers) challenged |= hd.name == "WWW-Authenticate";
    EXPECT_TRUE(challenged) << auth;
  }
  EXPECT_EQ(reloads, 4);
  EXPECT_EQ(call(h, "POST", "/admin/reload").status, 200);  // loopback needs no token
}

}  // namespace
}  // namespace infergate::frontend
