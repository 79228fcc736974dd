#include "frontend/server_metrics.h"

namespace infergate::frontend {

ServerMetrics::ServerMetrics(common::MetricsRegistry& registry,
                             const std::vector<std::string>& models)
    : registry_(registry),
      models_(models),
      body_assembled_(&registry.counter(
          "infergate_http_body_assembled_bytes_total",
          "HTTP/1.1 request body bytes assembled into a buffer before decoding (not streamed).")),
      grpc_gathered_(&registry.counter(
          "infergate_grpc_gathered_bytes_total",
          "gRPC request message bytes gathered into a buffer because a message spanned DATA "
          "frames and could not be streamed into its slots (docs/PROTOCOLS.md).")) {
  requests_.resize(models.size() + 1);
  latency_.resize(models.size() + 1);
  for (size_t m = 0; m <= models.size(); ++m) {
    const std::string model = m == 0 ? "" : models[m - 1];
    for (int p = 0; p < net::kProtocols; ++p) {
      const std::string proto(net::protocolName(static_cast<net::Protocol>(p)));
      for (int c = 0; c < kCodeSlots; ++c) {
        std::string code = c < static_cast<int>(kCodes.size()) ? std::to_string(kCodes[c]) : "other";
        requests_[m][p][c] = &registry.counter(
            "infergate_requests_total", "Requests answered, by model, protocol and status code.",
            {{"model", model}, {"protocol", proto}, {"code", code}});
      }
      latency_[m][p] = &registry.histogram(
          "infergate_request_duration_seconds",
          "Time from the first byte of a request to its response being queued.",
          {{"model", model}, {"protocol", proto}}, common::latencyBucketsSeconds(), 1e9);
    }
  }
}

int ServerMetrics::modelIndex(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

void ServerMetrics::recordRequest(int model, net::Protocol protocol, int status,
                                  uint64_t latency_ns) {
  const size_t m = static_cast<size_t>(model + 1) < requests_.size() ? model + 1 : 0;
  const int p = static_cast<int>(protocol);
  int slot = kCodeSlots - 1;
  for (size_t c = 0; c < kCodes.size(); ++c) {
    if (kCodes[c] == status) {
      slot = static_cast<int>(c);
      break;
    }
  }
  requests_[m][p][slot]->inc();
  latency_[m][p]->record(latency_ns);
}

void ServerMetrics::recordParseError(std::string_view reason) {
  common::Counter* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(parse_mu_);
    for (auto& [r, counter] : parse_errors_) {
      if (r == reason) c = counter;
    }
    if (c == nullptr) {
      c = &registry_.counter("infergate_http_rejections_total",
                             "Requests rejected by the HTTP codec, by reason.",
                             {{"reason", std::string(reason)}});
      parse_errors_.emplace_back(std::string(reason), c);
    }
  }
  c->inc();
}

}  // namespace infergate::frontend
