#include "backends/tfserving_backend.h"

#include <fmt/format.h>

#include <charconv>

namespace infergate::backends {

TfServingClient::TfServingClient(const ModelConfig& config, const RemoteBackendConfig& remote,
                                 std::string address)
    : config_(config),
      model_name_(remote.model_name.empty() ? config.name : remote.model_name),
      remote_(remote),
      grpc_(std::move(address), static_cast<int>(remote.channels),
            static_cast<int>(std::min<uint64_t>(remote.max_message_bytes, INT32_MAX))) {
  if (!remote.model_version.empty()) {
    std::from_chars(remote.model_version.data(),
                    remote.model_version.data() + remote.model_version.size(), version_);
  }
}

wire::TfModelSpec TfServingClient::spec() const {
  wire::TfModelSpec s;
  s.name = model_name_;
  s.version = version_;
  s.signature_name = remote_.signature_name;
  return s;
}

absl::Status TfServingClient::probe(bool fresh) {
  GrpcResult r = grpc_.callSync(kMethodTfModelStatus, wire::encodeGetModelStatus(spec()),
                                remote_.health_check_timeout_ms);
  if (!r.status.ok()) {
    return absl::UnavailableError(fmt::format("GetModelStatus '{}': {}: {}", model_name_,
                                              absl::StatusCodeToString(r.status.code()),
                                              std::string(r.status.message())));
  }
  return wire::decodeModelStatus(r.body);
}

namespace {
struct PredictCall {
  wire::ModelInferEncoding enc;
};
}  // namespace

void TfServingClient::send(const Batch& batch, const SendOptions& options, SendDone done) {
  auto call = std::make_shared<PredictCall>();
  std::vector<wire::InferInput> inputs(batch.inputs.size());
  for (size_t i = 0; i < batch.inputs.size(); ++i) {
    const BatchTensor& t = batch.inputs[i];
    if (t.dtype == DataType::kBytes) {
      done(absl::UnimplementedError("the tfserving backend does not send BYTES tensors"), false);
      return;
    }
    inputs[i] = {t.name, t.dtype, &t.shape, t.data, t.bytes, {}, 0};
  }
  std::vector<std::string_view> filter;
  for (const TensorSpec& o : config_.outputs) filter.push_back(o.name);
  wire::encodePredict(spec(), inputs, filter, call->enc);
  grpc_.call(kMethodPredict, call->enc, options.timeout_ms,
             [this, call, done = std::move(done)](GrpcResult r) mutable {
               if (!r.status.ok()) {
                 done(r.status, r.not_sent);
                 return;
               }
               absl::StatusOr<std::vector<wire::InferResponseOutput>> outs =
                   wire::decodePredictResponse(r.body);
               if (!outs.ok()) {
                 done(outs.status(), false);
                 return;
               }
               std::vector<BatchTensor> result;
               for (const TensorSpec& spec : config_.outputs) {
                 const wire::InferResponseOutput* o = nullptr;
                 for (const auto& x : *outs) {
                   if (x.name == spec.name) o = &x;
                 }
                 if (o == nullptr || o->datatype != dataTypeName(spec.dtype)) {
                   done(absl::InternalError(fmt::format(
                            "{} returned {} for output '{}' (configured {})", grpc_.address(),
                            o == nullptr ? std::string("nothing") : o->datatype, spec.name,
                            dataTypeName(spec.dtype))),
                        false);
                   return;
                 }
                 result.push_back(BatchTensor{spec.name, spec.dtype, o->shape,
                                              const_cast<uint8_t*>(o->raw), o->raw_bytes});
               }
               done(std::move(result), false);
             });
}

absl::StatusOr<std::unique_ptr<BatchBackend>> createTfServingBackend(
    const ModelConfig& config, common::MetricsRegistry* metrics) {
  if (config.remote == nullptr || config.remote->endpoints.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("model '{}': backend tfserving needs tfserving.endpoints", config.name));
  }
  for (const TensorSpec& t : config.inputs) {
    if (wire::tfDataType(t.dtype) == 0) {
      return absl::InvalidArgumentError(fmt::format(
          "model '{}': input '{}' is {}, which the tfserving backend cannot send", config.name,
          t.name, dataTypeName(t.dtype)));
    }
  }
  const RemoteBackendConfig& remote = *config.remote;
  std::vector<std::unique_ptr<EndpointClient>> clients;
  for (const std::string& ep : remote.endpoints) {
    clients.push_back(std::make_unique<TfServingClient>(config, remote, ep));
  }
  auto pool = std::make_unique<Pool>(config.name, "tfserving", remote, std::move(clients), metrics);
  absl::Status s = pool->start(true);
  if (!s.ok()) return s;
  return std::unique_ptr<BatchBackend>(std::move(pool));
}

}  // namespace infergate::backends
