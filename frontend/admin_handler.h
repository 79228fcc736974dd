#pragma once
// The admin listener's API: GET /metrics (Prometheus text format), /v2/health/live and
// /v2/health/ready (for probes that should not share the data port), plus GET routes the app
// adds (addRoute: /admin/gpu, docs/GPU.md).

#include <functional>
#include <map>
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

  // A GET route on `path` (exact match, the query string is the route's business), answered on
  // the admin reactor's thread: keep it quick. Add routes before the listener starts.
  using Route = std::function<HttpResponse(const HttpRequest&)>;
  void addRoute(std::string path, Route route) { routes_[std::move(path)] = std::move(route); }

 private:
  std::map<std::string, Route, std::less<>> routes_;
  common::MetricsRegistry& metrics_;
  const backends::ModelRegistry& models_;
};

}  // namespace infergate::frontend
