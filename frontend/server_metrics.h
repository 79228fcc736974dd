#pragma once
// The request-path metrics every frontend records, registered once per model so recording
// is a sharded relaxed add (see common/metrics.h).
//
// Threading: recordRequest/modelIndex from any thread (reactors), lock-free; addModel from the
// configuration-reload thread. A model's row, once added, lives as long as the ServerMetrics
// (a model removed by a reload keeps its series: counters never go backwards), and at most
// kMaxModels rows exist; requests for a model beyond that are counted under model="".

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "net/protocol.h"

namespace infergate::frontend {

class ServerMetrics {
 public:
  // The status codes counted individually; anything else is counted as "other".
  static constexpr std::array<int, 18> kCodes = {200, 400, 404, 405, 408, 411, 413, 414, 415,
                                                 417, 429, 431, 500, 501, 502, 503, 504, 505};

  // `models`: names of the configured models (index = position); requests that are not for a
  // model (health, metadata of the server, errors before routing) use model index -1.
  ServerMetrics(common::MetricsRegistry& registry, const std::vector<std::string>& models);

  // A finished request: its model index (-1 none), protocol, HTTP status, and latency.
  void recordRequest(int model, net::Protocol protocol, int status, uint64_t latency_ns);
  // A request rejected by a codec before routing (malformed, too large, timeout...).
  void recordParseError(std::string_view reason);

  // HTTP/1.1 request body bytes assembled into a buffer before decoding (JSON bodies, and the
  // binary bodies that cannot be streamed: docs/PROTOCOLS.md "HTTP/1.1 body streaming"):
  // infergate_http_body_assembled_bytes_total. Tensor bytes among them are also counted as
  // copies in the request's received_copy_bytes; JSON text is counted only here.
  void recordBodyAssembled(uint64_t bytes) { body_assembled_->inc(bytes); }
  uint64_t bodyAssembledBytes() const { return body_assembled_->value(); }
  // gRPC message bytes gathered across DATA frames (Http2SessionStats::gathered_bytes, every
  // connection): infergate_grpc_gathered_bytes_total. Tensor bytes among them are also in the
  // request's received_copy_bytes.
  void recordGrpcGathered(uint64_t bytes) { grpc_gathered_->inc(bytes); }
  uint64_t grpcGatheredBytes() const { return grpc_gathered_->value(); }

  // The model's index (-1: not known).
  int modelIndex(std::string_view name) const;
  // Registers a model added at run time (configuration reload) and returns its index; the
  // existing index when the name is known; -1 when kMaxModels rows exist already.
  int addModel(const std::string& name);

  static constexpr size_t kMaxModels = 1024;

 private:
  static constexpr int kCodeSlots = kCodes.size() + 1;  // + "other"
  struct Row {
    std::string model;  // "" for requests that are not for a model
    std::array<std::array<common::Counter*, kCodeSlots>, net::kProtocols> requests;
    std::array<common::Histogram*, net::kProtocols> latency;
  };
  std::unique_ptr<Row> makeRow(const std::string& model);

  common::MetricsRegistry& registry_;
  // rows_[0]: no model; rows_[i + 1]: model index i. Published with release once complete;
  // count_ rows are valid. Never freed before the ServerMetrics.
  std::array<std::atomic<const Row*>, kMaxModels + 1> rows_{};
  std::atomic<size_t> count_{0};
  std::mutex add_mu_;  // addModel (rare)
  std::vector<std::unique_ptr<Row>> owned_;
  common::Counter* body_assembled_;
  common::Counter* grpc_gathered_;
  std::mutex parse_mu_;  // only on the error path
  std::vector<std::pair<std::string, common::Counter*>> parse_errors_;
};

}  // namespace infergate::frontend
