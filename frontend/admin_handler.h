#pragma once
// The admin listener's API: GET /metrics (Prometheus text format), /v2/health/live and
// /v2/health/ready (for probes that should not share the data port), plus GET routes the app
// adds (addRoute: /admin/gpu, docs/GPU.md) and POST routes (addPostRoute: /admin/reload,
// docs/OPERATIONS.md "Reload").
//
// Who may use what (docs/SECURITY.md "Admin listener"): /metrics and /v2/health/* answer any
// peer (Prometheus and the kubelet scrape them); every /admin/ route, and every POST, answers a
// loopback peer, or a peer that presents `Authorization: Bearer <admin.token>`. Anyone else gets
// 401 (a token is configured) or 403 (none is).

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "backends/model.h"
#include "common/metrics.h"
#include "frontend/http_handler.h"

namespace infergate::frontend {

class AdminHandler : public HttpHandler {
 public:
  AdminHandler(common::MetricsRegistry& metrics, const backends::ModelRegistry& models)
      : metrics_(metrics), models_(models) {}
  void handle(HttpRequest&& request, HttpRespond respond) override;

  // The bearer token that admits a non-loopback peer to the /admin/ routes; empty: none does.
  void setToken(std::string token) { token_ = std::move(token); }
  // Whether `peer` is a loopback address (127.0.0.0/8, ::1, or their v4-mapped form).
  static bool loopback(const std::optional<common::IpBytes>& peer);

  // A GET route on `path` (exact match, the query string is the route's business), answered on
  // the admin reactor's thread: keep it quick. Add routes before the listener starts.
  using Route = std::function<HttpResponse(const HttpRequest&)>;
  void addRoute(std::string path, Route route) { routes_[std::move(path)] = std::move(route); }
  // A POST route (POST /admin/reload): the same rules; the body is the route's business.
  void addPostRoute(std::string path, Route route) {
    post_routes_[std::move(path)] = std::move(route);
  }

 private:
  std::map<std::string, Route, std::less<>> routes_;
  std::map<std::string, Route, std::less<>> post_routes_;
  common::MetricsRegistry& metrics_;
  const backends::ModelRegistry& models_;
  std::string token_;
};

}  // namespace infergate::frontend
