#pragma once
// The `tfserving` backend: batches sent to TensorFlow Serving with
// tensorflow.serving.PredictionService/Predict, tensors as tensor_content (referenced from the
// batch buffers, not copied), model spec name / version / signature from the configuration,
// over a Pool of endpoints (backends/pool.h). Health: ModelService/GetModelStatus (some version
// AVAILABLE). BYTES tensors are not supported (TF Serving carries strings as string_val).
// docs/BACKENDS.md.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/batched_model.h"
#include "backends/grpc_client.h"
#include "backends/pool.h"

namespace infergate::backends {

class TfServingClient : public EndpointClient {
 public:
  TfServingClient(const ModelConfig& config, const RemoteBackendConfig& remote,
                  std::string address);
  const std::string& address() const override { return grpc_.address(); }
  absl::Status probe(bool fresh) override;
  void send(const Batch& batch, const SendOptions& options, SendDone done) override;

 private:
  wire::TfModelSpec spec() const;
  ModelConfig config_;
  std::string model_name_;
  int64_t version_ = -1;
  const RemoteBackendConfig& remote_;
  GrpcEndpoint grpc_;
};

absl::StatusOr<std::unique_ptr<BatchBackend>> createTfServingBackend(
    const ModelConfig& config, common::MetricsRegistry* metrics);

}  // namespace infergate::backends
