#pragma once
// The `tfserving` backend: batches sent to TensorFlow Serving with
// tensorflow.serving.PredictionService/Predict, tensors as tensor_content (referenced from the
// batch buffers, not copied), model spec name / version / signature from the configuration,
// over a Pool of endpoints (backends/pool.h). BYTES tensors travel as DT_STRING string_val (one
// field per element, copied into the request; DT_STRING outputs are copied back into the BYTES
// layout). Health: ModelService/GetModelStatus (some version AVAILABLE). Start-up (and every
// endpoint that becomes healthy again), with validate_metadata: PredictionService/
// GetModelMetadata, whose signature_def for signature_name must serve the configured inputs and
// outputs; otherwise the endpoint is refused with FAILED_PRECONDITION naming every difference.
// docs/BACKENDS.md.
//
// Threading: as Pool.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/batched_model.h"
#include "backends/grpc_client.h"
#include "backends/grpc_client_wire.h"
#include "backends/pool.h"

namespace infergate::backends {

// OK when the signature `signature_name` of `signatures` (a GetModelMetadata signature_def map)
// can serve `config`'s inputs and outputs, matched by alias (the signature's map keys); otherwise
// FAILED_PRECONDITION listing every difference: a missing signature (naming those that exist), a
// configured input or output the signature lacks, a signature input that is not configured, a
// dtype other than the configured datatype's DT_*, or a shape (batch dimension included, as
// ModelConfig::fullShape) the signature does not accept (its -1 accepts anything; unknown rank
// accepts any shape).
absl::Status compareTfSignature(const ModelConfig& config, std::string_view signature_name,
                                const std::vector<wire::TfSignatureDef>& signatures);

class TfServingClient : public EndpointClient {
 public:
  TfServingClient(const ModelConfig& config, const RemoteBackendConfig& remote,
                  std::string address);
  const std::string& address() const override { return grpc_.address(); }
  // GetModelStatus; when `fresh` and remote.validate_metadata, also GetModelMetadata and
  // compareTfSignature (FAILED_PRECONDITION on a mismatch, which the pool's start-up reports).
  absl::Status probe(bool fresh) override;
  void send(const Batch& batch, const SendOptions& options, SendDone done) override;

 private:
  wire::TfModelSpec spec() const;
  absl::Status validateMetadata();
  ModelConfig config_;
  std::string model_name_;
  int64_t version_ = -1;
  const RemoteBackendConfig& remote_;
  GrpcEndpoint grpc_;
};

// The tfserving backend of `config` (config.remote set, backend "tfserving"): clients, pool,
// start-up checks. FAILED_PRECONDITION for a signature mismatch, UNAVAILABLE when no endpoint is
// ready within startup_timeout_ms.
absl::StatusOr<std::unique_ptr<BatchBackend>> createTfServingBackend(
    const ModelConfig& config, common::MetricsRegistry* metrics);

}  // namespace infergate::backends
