#pragma once
// The gRPC services infergate serves, behind GrpcServices:
//   inference.GRPCInferenceService: ServerLive, ServerReady, ModelReady, ServerMetadata,
//     ModelMetadata, ModelInfer, ModelStreamInfer (KServe v2 / Triton-compatible);
//   tensorflow.serving.PredictionService: Predict.
// Errors carry the gRPC codes Triton uses (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, ...).
// Threading: resolve()/call() on a loop thread; models may answer from any thread.

#include <memory>
#include <string_view>

#include "backends/model.h"
#include "frontend/grpc_services.h"
#include "frontend/http2_session.h"
#include "frontend/kserve_rest.h"
#include "frontend/server_metrics.h"

namespace infergate::frontend {

// ModelInfer/ModelStreamInfer decode raw_input_contents one copy into the model's batch slots
// (Model::placeInputs) and carry the call's cancel token (GrpcCall::cancel) to the model.
class InferenceGrpcServices : public GrpcServices {
 public:
  enum Method : int {
    kServerLive,
    kServerReady,
    kModelReady,
    kServerMetadata,
    kModelMetadata,
    kModelInfer,
    kModelStreamInfer,
    kPredict,
  };

  // `metrics` may be null; it only resolves model indices here (the session records).
  InferenceGrpcServices(const backends::ModelRegistry& registry, ServerInfo info,
                        ServerMetrics* metrics);

  GrpcMethod resolve(std::string_view path) const override;
  void call(const GrpcMethod& method, GrpcCall& call, std::string_view message,
            GrpcRespond respond) override;
  // ModelInfer: a streaming decoder (grpc_infer_stream.h) that writes raw_input_contents from
  // the DATA chunks into the slots; other methods: none (whole messages).
  std::unique_ptr<GrpcMessageSink> openSink(const GrpcMethod& method, GrpcCall& call) override;

  // What a ModelInfer header is checked against before any tensor byte is copied: finds the
  // model (into `model`), resolves the priority, asks Model::admission (refuse before copying:
  // its status is the answer) and places the inputs. Unknown/unready models and priority
  // errors are answered after the decode, as before.
  absl::Status admitHeader(GrpcCall& call, backends::InferRequest& header,
                           backends::Model*& model);
  // The rest of ModelInfer/ModelStreamInfer once the message is decoded (`decoded`).
  void answerInfer(GrpcCall& call, absl::Status decoded, backends::InferRequest&& req,
                   backends::Model* model, GrpcRespond respond, bool stream);

 private:
  class ModelInferSink;
  void modelInfer(GrpcCall& call, std::string_view message, GrpcRespond respond, bool stream);
  void predict(GrpcCall& call, std::string_view message, GrpcRespond respond);

  const backends::ModelRegistry& registry_;
  ServerInfo info_;
  ServerMetrics* metrics_;
};

}  // namespace infergate::frontend
