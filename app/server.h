#pragma once
// Wires a Config into a running gateway: models, metrics, codecs, reactors, admin listener
// (and, in xdp-filter mode, the XDP program). Used by `infergate run`.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
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
#include "frontend/tenants.h"

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

  // Configuration reload (app/reload.h, docs/OPERATIONS.md "Reload"): the file the running
  // configuration came from and its text (`infergate run -c`); without it reload() refuses.
  void setReloadSource(std::string path, std::string text);
  // Re-reads the file, validates it, and applies what can change live (models added, removed
  // or replaced, logging.level, xdp-filter mode's rules), or nothing when any changed key
  // cannot (the answer names it). SIGHUP (main.cc) and POST /admin/reload (the admin thread);
  // serialized. Counted in infergate_config_reloads_total{result}; logged.
  struct ReloadResult {
    std::string result;  // "ok" | "refused" | "invalid"
    int http_status = 200;  // 200 | 409 (refused) | 400 (invalid) | 503 (stopping)
    std::string json;       // {"result":..,"generation":..,"hash":..,"applied":[..],"refused":[..]}
  };
  ReloadResult reload();

 private:
  // config.security: the drop after start-up, before any reactor serves (app/privileges.h).
  absl::Status dropPrivileges(common::MetricsRegistry& registry);
  config::Config config_;  // the start-up configuration (modes keep references into it)
  // Reload state (reload_mu_): the running configuration and its text, the generation.
  std::mutex reload_mu_;
  std::string reload_path_;
  std::string running_text_;
  config::Config running_;
  uint64_t generation_ = 1;
  bool stopping_ = false;  // stop() began: reloads are refused
  common::Counter* reloads_ok_ = nullptr;
  common::Counter* reloads_refused_ = nullptr;
  common::Counter* reloads_invalid_ = nullptr;
  common::Gauge* generation_gauge_ = nullptr;
  std::shared_ptr<std::string> hash_;  // read by the /metrics collector under *hash_mu_
  std::shared_ptr<std::mutex> hash_mu_ = std::make_shared<std::mutex>();
  backends::PinnedOptions pinned_;
  backends::ModelRegistry models_;
  std::unique_ptr<dataplane::ConnectionMetrics> connection_metrics_;
  std::unique_ptr<frontend::ServerMetrics> metrics_;
  std::unique_ptr<frontend::KServeRestHandler> kserve_;
  std::unique_ptr<frontend::AdminHandler> admin_handler_;
  std::unique_ptr<frontend::InferenceGrpcServices> grpc_;
  frontend::Http2SessionOptions http2_options_;
  // Who may choose priorities (config priority:); both option sets point here; a reload
  // publishes a new policy.
  frontend::ClientPriorityPolicies client_priority_;
  // Per-tenant limits (config tenants:, frontend/tenants.h); current() null when off. Both
  // serving option sets point here (the admin listener is never limited); a reload publishes
  // a new limiter.
  frontend::TenantLimiters tenants_;
  frontend::Http1SessionOptions http_options_;
  frontend::Http1SessionOptions admin_options_;
  std::atomic<uint64_t> connections_{0};
  std::unique_ptr<ServingMode> mode_;  // chosen once from config.mode (app/modes/mode.h)
  std::unique_ptr<dataplane::SocketReactor> admin_;
  std::unique_ptr<GpuWatch> gpu_;  // config.gpu.enabled (docs/GPU.md)
};

}  // namespace infergate::app
