#include "frontend/server_metrics.h"

namespace infergate::frontend {

ServerMetrics::ServerMetrics(common::MetricsRegistry& registry,
                             const std::vector<std::string>& models)
    : registry_(registry),
      body_assembled_(&registry.counter(
          "infergate_http_body_assembled_bytes_total",
          "HTTP/1.1 request body bytes assembled into a buffer before decoding (not streamed).")),
      grpc_gathered_(&registry.counter(
          "infergate_grpc_gathered_bytes_total",
          "gRPC request message bytes gathered into a buffer because a message spanned DATA "
          "frames and could not be streamed into its slots (docs/PROTOCOLS.md).")) {
  owned_.push_back(makeRow(""));
  rows_[0].store(owned_.back().get(), std::memory_order_relaxed);
  count_.store(1, std::memory_order_release);
  for (const std::string& m : models) addModel(m);
}

std::unique_ptr<ServerMetrics::Row> ServerMetrics::makeRow(const std::string& model) {
  auto row = std::make_unique<Row>();
  row->model = model;
  for (int p = 0; p < net::kProtocols; ++p) {
    const std::string proto(net::protocolName(static_cast<net::Protocol>(p)));
    for (int c = 0; c < kCodeSlots; ++c) {
      std::string code = c < static_cast<int>(kCodes.size()) ? std::to_string(kCodes[c]) : "other";
      row->requests[p][c] = &registry_.counter(
          "infergate_requests_total", "Requests answered, by model, protocol and status code.",
          {{"model", model}, {"protocol", proto}, {"code", code}});
    }
    row->latency[p] = &registry_.histogram(
        "infergate_request_duration_seconds",
        "Time from the first byte of a request to its response being queued.",
        {{"model", model}, {"protocol", proto}}, common::latencyBucketsSeconds(), 1e9);
  }
  return row;
}

int ServerMetrics::addModel(const std::string& name) {
  std::lock_guard<std::mutex> lock(add_mu_);
  if (int i = modelIndex(name); i >= 0) return i;
  const size_t n = count_.load(std::memory_order_relaxed);
  if (n >= rows_.size()) return -1;
  owned_.push_back(makeRow(name));
  rows_[n].store(owned_.back().get(), std::memory_order_release);
  count_.store(n + 1, std::memory_order_release);
  return static_cast<int>(n) - 1;
}

int ServerMetrics::modelIndex(std::string_view name) const {
  const size_t n = count_.load(std::memory_order_acquire);
  for (size_t i = 1; i < n; ++i) {
    if (rows_[i].load(std::memory_order_acquire)->model == name) return static_cast<int>(i) - 1;
  }
  return -1;
}

void ServerMetrics::recordRequest(int model, net::Protocol protocol, int status,
                                  uint64_t latency_ns) {
  const size_t n = count_.load(std::memory_order_acquire);
  const size_t m = model >= 0 && static_cast<size_t>(model) + 1 < n ? model + 1 : 0;
  const Row* row = rows_[m].load(std::memory_order_acquire);
  const int p = static_cast<int>(protocol);
  int slot = kCodeSlots - 1;
  for (size_t c = 0; c < kCodes.size(); ++c) {
    if (kCodes[c] == status) {
      slot = static_cast<int>(c);
      break;
    }
  }
  row->requests[p][slot]->inc();
  row->latency[p]->record(latency_ns);
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
