#pragma once
// KServe v2 / Open Inference Protocol REST API over HTTP (the router):
//   GET  /v2/health/live, /v2/health/ready, /v2
//   GET  /v2/models/{name}[/versions/{v}], .../ready
//   POST /v2/models/{name}[/versions/{v}]/infer   (JSON tensors and the binary extension)
// Status codes follow Triton's mapping (docs/PROTOCOLS.md). Threading: handle() runs on the
// connection's loop thread; models may answer from any thread.

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "backends/model.h"
#include "frontend/http_handler.h"
#include "frontend/status_map.h"
#include "frontend/server_metrics.h"

namespace infergate::frontend {

struct ServerInfo {
  std::string name = "infergate";
  std::string version;
};


// The header (HTTP/1.1) and gRPC metadata key that carries a request's priority: a Triton level
// (1 = highest .. priority_levels; 0 = the model's default level), decimal.
inline constexpr std::string_view kPriorityHeader = "x-infergate-priority";

// A request's priority (InferRequest::priority, a Triton level; 0 = the default level), from
// the first source present (docs/BATCHING.md "Priority"):
//   1. `kserve_priority` > 0: the KServe `priority` request parameter, as decoded;
//   2. `header` (non-null): the x-infergate-priority header / metadata value;
//   (1 and 2 only when `client_trusted`: the connection's source may choose its priority,
//   ClientPriorityPolicy; otherwise they are ignored, not refused)
//   3. `tag_class`: the XDP tag's class 0..3, mapped to `levels` Triton levels
//      (Model::priorityLevels) by backends::levelOfPriorityClass (with `levels` 0 — a model without priority levels — the
//      class is ignored);
//   4. else 0 (the level default).
// INVALID_ARGUMENT when the header value is not a non-negative decimal integer.
absl::StatusOr<int64_t> resolvePriority(int64_t kserve_priority, const std::string* header,
                                        std::optional<int> tag_class, uint32_t levels,
                                        bool client_trusted);

// Infer requests are decoded one copy into the model's batch slots when it has them
// (Model::placeInputs, docs/BATCHING.md "One copy") and carry the session's cancel token
// (HttpRequest::cancel) to the model.
class KServeRestHandler : public HttpHandler {
 public:
  KServeRestHandler(const backends::ModelRegistry& registry, ServerInfo info,
                    ServerMetrics* metrics);
  void handle(HttpRequest&& request, HttpRespond respond) override;
  // Streams the body of POST .../infer (frontend/kserve_body_stream.h): binary-extension
  // bodies and raw binary bodies with a Content-Length are decoded as they arrive, straight
  // into the model's slots; a request the model's admission refuses is answered with that
  // refusal and its body discarded unread (JSON bodies too, checked with the highest priority
  // the body could still ask for). Everything else (JSON bodies, chunked raw binary, TF Serving
  // REST, other paths) is assembled as before (null).
  std::unique_ptr<HttpBodyReader> startBody(HttpRequest& head, const HttpBodyInfo& body) override;

 private:
  void infer(HttpRequest&& request, backends::Model& model, int model_index, HttpRespond respond);

  const backends::ModelRegistry& registry_;
  ServerInfo info_;
  ServerMetrics* metrics_;
};

}  // namespace infergate::frontend
