// AdminHandler's routes: GET built-ins and added GET routes, POST routes (POST /admin/reload),
// and 405 with the right Allow header for the rest.
#include "frontend/admin_handler.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backends/model.h"
#include "common/metrics.h"

namespace infergate::frontend {
namespace {

HttpResponse call(AdminHandler& h, const std::string& method, const std::string& target) {
  HttpRequest r;
  r.method = method;
  r.target = target;
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

}  // namespace
}  // namespace infergate::frontend
