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
#include "frontend/tf_predict_codec.h"

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
  // the DATA chunks into the slots; Predict: one (tf_predict_stream.h) that writes a
  // tensor_content ending the message likewise; other methods: none (whole messages).
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
  class PredictSink;
  void modelInfer(GrpcCall& call, std::string_view message, GrpcRespond respond, bool stream);
  // `copies_before`: userspace copies of each tensor byte before the decoder's write (a
  // gathered message: InferRequest::received_copy_bytes).
  void predict(GrpcCall& call, std::string_view message, GrpcRespond respond,
               int copies_before = 0);
  // The Predict header checks in the whole decoder's order once `scan` is known: the model
  // (into `model`; an error: NOT_FOUND / UNAVAILABLE), then Model::admission.
  absl::Status admitPredict(GrpcCall& call, const PredictRequestScan& scan,
                            backends::Model*& model);
  // Validation, the deadline and the model's answer for a decoded Predict request.
  void answerPredict(GrpcCall& call, backends::InferRequest&& req, backends::Model* model,
                     GrpcRespond respond);

  const backends::ModelRegistry& registry_;
  ServerInfo info_;
  ServerMetrics* metrics_;
};

}  // namespace infergate::frontend
