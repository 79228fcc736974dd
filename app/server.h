#pragma once
// Wires a Config into a running gateway: models, metrics, codecs, reactors, admin listener
// (and, in xdp-filter mode, the XDP program). Used by `infergate run`.

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "backends/model.h"
#include "backends/pinned_memory.h"
#include "common/metrics.h"
#include "config/config.h"
#include "dataplane/socket_reactor.h"
#include "frontend/admin_handler.h"
#include "frontend/grpc_inference_service.h"
#include "frontend/http1_session.h"
#include "frontend/http2_session.h"
#include "frontend/kserve_rest.h"
#include "frontend/server_metrics.h"

namespace infergate::app {

class ServingMode;
class GpuWatch;

class Server {
 public:
  explicit Server(config::Config config);
  ~Server();
  // Builds everything and starts the reactor threads; logs one line per step. On failure the
  // status says what to fix, and nothing is left running.
  absl::Status start();
  // Stops accepting, drains in-flight requests for up to `drain_ms`, and joins the threads.
  void stop(uint64_t drain_ms);

 private:
  // config.security: the drop after start-up, before any reactor serves (app/privileges.h).
  absl::Status dropPrivileges(common::MetricsRegistry& registry);
  config::Config config_;
  backends::PinnedOptions pinned_;
  backends::ModelRegistry models_;
  std::unique_ptr<dataplane::ConnectionMetrics> connection_metrics_;
  std::unique_ptr<frontend::ServerMetrics> metrics_;
  std::unique_ptr<frontend::KServeRestHandler> kserve_;
  std::unique_ptr<frontend::AdminHandler> admin_handler_;
  std::unique_ptr<frontend::InferenceGrpcServices> grpc_;
  frontend::Http2SessionOptions http2_options_;
  frontend::ClientPriorityPolicy client_priority_;  // both option sets point here
  frontend::Http1SessionOptions http_options_;
  frontend::Http1SessionOptions admin_options_;
  std::atomic<uint64_t> connections_{0};
  std::unique_ptr<ServingMode> mode_;  // chosen once from config.mode (app/modes/mode.h)
  std::unique_ptr<dataplane::SocketReactor> admin_;
  std::unique_ptr<GpuWatch> gpu_;  // config.gpu.enabled (docs/GPU.md)
};

}  // namespace infergate::app
