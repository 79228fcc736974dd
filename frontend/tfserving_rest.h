#pragma once
// TensorFlow Serving REST API (the subset infergate serves), reached through the KServe router
// (KServeRestHandler delegates every /v1/ path here):
//   POST /v1/models/{name}[/versions/{v}]:predict   row ("instances") or columnar ("inputs")
//   GET  /v1/models/{name}[/versions/{v}]           model version status
// Bodies follow TF Serving: {"predictions": ...} for the row format, {"outputs": ...} for the
// columnar one, {"error": "..."} on failure with TF Serving's HTTP status for the code
// (httpStatusFor, frontend/status_map.h). Bare NaN, Inf, Infinity, -Inf, -Infinity tokens are accepted in
// requests (as TF Serving's RapidJSON with kParseNanAndInfFlag) and written in responses.
// BYTES tensors: JSON strings, or {"b64": "..."} objects (outputs that are not valid UTF-8 are
// written as {"b64": ...}).
// Threading: handle() on the connection's loop thread; models may answer from any thread.

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "backends/model.h"
#include "frontend/http_handler.h"
#include "frontend/server_metrics.h"

namespace infergate::frontend {

enum class TfPredictFormat { kRow, kColumnar };


// Copies `json` with every bare non-finite token outside strings (NaN, -NaN, Inf, -Inf,
// Infinity, -Infinity) replaced by a marker string literal the predict decoder reads back as
// the float value. Returns false (and leaves `out` untouched) when there is none, so the
// common body is parsed in place.
bool rewriteNonFiniteTokens(std::string_view json, std::string& out);

// Decodes a :predict body into a request for `model` (inputs in the model's order, protocol
// kHttpTfServing). Shapes come from the JSON nesting (row format: [number of instances] + each
// instance's shape); ragged lists, unknown inputs, values that do not fit the input's datatype
// are INVALID_ARGUMENT. Validation against the model config (rank, dims, batch size) is
// backends::validateRequest's job.
// One copy (docs/BATCHING.md): a first pass checks every input's shape against the model and
// every value, and measures its bytes (Tensor::slot_bytes); then `place` (when non-null and
// non-empty: Model::placeInputs) may give the inputs slots, and a second pass writes each
// element straight from the parsed document into its slot, else into Tensor::data.
absl::StatusOr<backends::InferRequest> decodeTfPredictRequest(
    std::string_view body, const backends::ModelConfig& model, TfPredictFormat* format,
    const backends::InputPlacer* place = nullptr);

// {"predictions": [...]} (row: one entry per batch row; an object of outputs when there are
// several) or {"outputs": ...} (columnar: the tensor, or an object of named tensors).
absl::StatusOr<std::string> encodeTfPredictResponse(const backends::InferResponse& response,
                                                    TfPredictFormat format);

// {"model_version_status":[{"version":"1","state":"AVAILABLE","status":{...}}]}
std::string encodeTfModelStatus(const backends::Model& model);

// Stateless apart from the references: cheap to construct per request.
class TfServingRestHandler {
 public:
  TfServingRestHandler(const backends::ModelRegistry& registry, ServerMetrics* metrics);
  static bool handles(std::string_view path) { return path.substr(0, 4) == "/v1/"; }
  void handle(HttpRequest&& request, HttpRespond respond,
              std::shared_ptr<net::CancelToken> cancel);

 private:
  const backends::ModelRegistry& registry_;
  ServerMetrics* metrics_;
};

}  // namespace infergate::frontend
