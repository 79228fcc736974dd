#pragma once
// KServe v2 / Open Inference Protocol REST API over HTTP (the router):
//   GET  /v2/health/live, /v2/health/ready, /v2
//   GET  /v2/models/{name}[/versions/{v}], .../ready
//   POST /v2/models/{name}[/versions/{v}]/infer   (JSON tensors and the binary extension)
// Status codes follow Triton's mapping (docs/PROTOCOLS.md). Threading: handle() runs on the
// connection's loop thread; models may answer from any thread.

#include <string>

#include "backends/model.h"
#include "frontend/http1_session.h"
#include "frontend/http_handler.h"
#include "frontend/server_metrics.h"

namespace infergate::frontend {

struct ServerInfo {
  std::string name = "infergate";
  std::string version;
};

// Maps a status code to the HTTP status Triton would send (INVALID_ARGUMENT 400, NOT_FOUND
// 404, UNAVAILABLE 503, UNIMPLEMENTED 501, RESOURCE_EXHAUSTED 429, DEADLINE_EXCEEDED 504,
// INTERNAL and others 500).
int httpStatusFor(const absl::Status& status);

// Infer requests are decoded one copy into the model's batch slots when it has them
// (Model::placeInputs, docs/BATCHING.md "One copy") and carry the session's cancel token
// (CancellableHttpHandler) to the model.
class KServeRestHandler : public CancellableHttpHandler {
 public:
  KServeRestHandler(const backends::ModelRegistry& registry, ServerInfo info,
                    ServerMetrics* metrics);
  void handle(HttpRequest&& request, HttpRespond respond) override;
  void handle(HttpRequest&& request, HttpRespond respond,
              std::shared_ptr<backends::CancelToken> cancel) override;

 private:
  void infer(HttpRequest&& request, backends::Model& model, int model_index, HttpRespond respond,
             std::shared_ptr<backends::CancelToken> cancel);

  const backends::ModelRegistry& registry_;
  ServerInfo info_;
  ServerMetrics* metrics_;
};

}  // namespace infergate::frontend
