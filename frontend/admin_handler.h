#pragma once
// The admin listener's API: GET /metrics (Prometheus text format), /v2/health/live and
// /v2/health/ready (for probes that should not share the data port).

#include "backends/model.h"
#include "common/metrics.h"
#include "frontend/http_handler.h"

namespace infergate::frontend {

class AdminHandler : public HttpHandler {
 public:
  AdminHandler(common::MetricsRegistry& metrics, const backends::ModelRegistry& models)
      : metrics_(metrics), models_(models) {}
  void handle(HttpRequest&& request, HttpRespond respond) override;

 private:
  common::MetricsRegistry& metrics_;
  const backends::ModelRegistry& models_;
};

}  // namespace infergate::frontend
