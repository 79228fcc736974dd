#include "backends/tfserving_backend.h"

#include <fmt/format.h>

#include <charconv>

#include "backends/dns_resolver.h"

namespace infergate::backends {

namespace {

std::string tfShapeText(const wire::TfTensorInfo& t) {
  return t.unknown_rank ? std::string("unknown rank") : shapeToString(t.shape);
}

std::string aliases(const std::vector<wire::TfTensorInfo>& ts) {
  std::string out;
  for (const auto& t : ts) out += (out.empty() ? "" : ", ") + t.alias;
  return out.empty() ? "none" : out;
}

// Can a signature's shape `have` serve requests the config allows (`want`)? As the triton
// adapter: a signature -1 takes anything, a configured -1 needs a signature -1.
bool tfShapeServes(const std::vector<int64_t>& want, const wire::TfTensorInfo& have) {
  if (have.unknown_rank) return true;
  if (want.size() != have.shape.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (have.shape[i] == -1) continue;
    if (want[i] != have.shape[i]) return false;
  }
  return true;
}

void compareTfTensors(const ModelConfig& config, std::string_view signature,
                      const std::vector<TensorSpec>& specs,
                      const std::vector<wire::TfTensorInfo>& have, const char* kind,
                      const char* one, bool extra_is_error, std::vector<std::string>& diffs) {
  std::vector<bool> used(have.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const wire::TfTensorInfo* m = findTensorByName(
        have, s.name, [](const wire::TfTensorInfo& t) -> const std::string& { return t.alias; }, used);
    if (m == nullptr) {
      diffs.push_back(fmt::format(
          "{}[{}] '{}' is configured but signature '{}' has no such {} (it has: {})", kind, i,
          s.name, std::string(signature), one, aliases(have)));
      continue;
    }
    if (m->dtype != tfDataType(s.dtype)) {
      diffs.push_back(fmt::format("{}[{}] '{}': datatype {} ({}) configured, the backend has {}",
                                  kind, i, s.name, dataTypeName(s.dtype),
                                  wire::tfDataTypeName(tfDataType(s.dtype)),
                                  wire::tfDataTypeName(m->dtype)));
    }
    const std::vector<int64_t> want = config.fullShape(s);
    if (!tfShapeServes(want, *m)) {
      diffs.push_back(fmt::format("{}[{}] '{}': shape {} configured (with the batch dimension), "
                                  "the backend has {}",
                                  kind, i, s.name, shapeToString(want), tfShapeText(*m)));
    }
  }
  if (!extra_is_error) return;
  for (size_t j = 0; j < have.size(); ++j) {
    if (used[j]) continue;
    diffs.push_back(fmt::format(
        "signature '{}' also needs {} '{}' ({} {}), which is not configured",
        std::string(signature), one, have[j].alias, wire::tfDataTypeName(have[j].dtype),
        tfShapeText(have[j])));
  }
}

}  // namespace

absl::Status compareTfSignature(const ModelConfig& config, std::string_view signature_name,
                                const std::vector<wire::TfSignatureDef>& signatures) {
  const wire::TfSignatureDef* sig = nullptr;
  for (const auto& s : signatures) {
    if (s.key == signature_name) sig = &s;
  }
  if (sig == nullptr) {
    std::string have;
    for (const auto& s : signatures) have += (have.empty() ? "'" : ", '") + s.key + "'";
    return absl::FailedPreconditionError(fmt::format(
        "signature '{}' not found (the model has: {}; set tfserving.signature_name)",
        std::string(signature_name), have.empty() ? std::string("none") : have));
  }
  std::vector<std::string> diffs;
  compareTfTensors(config, signature_name, config.inputs, sig->inputs, "inputs", "input", true,
                   diffs);
  compareTfTensors(config, signature_name, config.outputs, sig->outputs, "outputs", "output",
                   false, diffs);
  if (diffs.empty()) return absl::OkStatus();
  std::string all;
  for (const std::string& d : diffs) all += (all.empty() ? "" : "; ") + d;
  return absl::FailedPreconditionError(all);
}

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
  absl::Status ready = wire::decodeModelStatus(r.body);
  if (!ready.ok() || !fresh || !remote_.validate_metadata) return ready;
  return validateMetadata();
}

absl::Status TfServingClient::validateMetadata() {
  GrpcResult r = grpc_.callSync(kMethodTfModelMetadata, wire::encodeGetModelMetadata(spec()),
                                remote_.health_check_timeout_ms);
  if (r.status.code() == absl::StatusCode::kUnimplemented) {
    return absl::FailedPreconditionError(fmt::format(
        "model '{}': {} does not implement GetModelMetadata ({}); set "
        "tfserving.validate_metadata: false to skip the signature check",
        config_.name, grpc_.address(), std::string(r.status.message())));
  }
  if (!r.status.ok()) {
    return absl::UnavailableError(fmt::format("GetModelMetadata '{}': {}: {}", model_name_,
                                              absl::StatusCodeToString(r.status.code()),
                                              std::string(r.status.message())));
  }
  absl::StatusOr<std::vector<wire::TfSignatureDef>> sigs = wire::decodeGetModelMetadata(r.body);
  if (!sigs.ok()) return sigs.status();
  absl::Status cmp = compareTfSignature(config_, remote_.signature_name, *sigs);
  if (!cmp.ok()) {
    return absl::FailedPreconditionError(fmt::format(
        "model '{}': the backend model '{}' at {} does not match the configuration: {}",
        config_.name, model_name_, grpc_.address(), std::string(cmp.message())));
  }
  return absl::OkStatus();
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
      // Elements must be exactly the buffer (the frontends built it; checked before encoding).
      const std::optional<std::vector<std::string_view>> elems =
          wire::splitBytesTensor(t.data, t.bytes);
      const std::optional<uint64_t> n = elementCount(t.shape);
      if (!elems || !n || elems->size() != *n) {
        done(absl::InvalidArgumentError(fmt::format(
                 "BYTES input '{}' of shape {}: the batch buffer does not hold exactly that "
                 "many length-prefixed elements",
                 t.name, shapeToString(t.shape))),
             false);
        return;
      }
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
               // DT_STRING outputs are laid out here; it lives until `done` returns.
               std::string strings;
               absl::StatusOr<std::vector<wire::InferResponseOutput>> outs =
                   wire::decodePredictResponse(r.body, strings);
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
             },
             batch.cancel);  // every client gone: RST_STREAM CANCEL reaches TF Serving
}

absl::StatusOr<std::unique_ptr<BatchBackend>> createTfServingBackend(
    const ModelConfig& config, common::MetricsRegistry* metrics) {
  if (config.remote == nullptr || config.remote->endpoints.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("model '{}': backend tfserving needs tfserving.endpoints", config.name));
  }
  for (const TensorSpec& t : config.inputs) {
    if (tfDataType(t.dtype) == 0) {
      return absl::InvalidArgumentError(fmt::format(
          "model '{}': input '{}' is {}, which the tfserving backend cannot send", config.name,
          t.name, dataTypeName(t.dtype)));
    }
  }
  const RemoteBackendConfig& remote = *config.remote;
  std::vector<std::unique_ptr<EndpointClient>> clients;
  for (const std::string& ep : remote.endpoints) {
    if (isDnsEntry(ep)) continue;  // resolved by the pool
    clients.push_back(std::make_unique<TfServingClient>(config, remote, ep));
  }
  auto pool = std::make_unique<Pool>(config.name, "tfserving", remote, std::move(clients), metrics);
  // Endpoints added at run time (dns:///, setEndpoints); the copy keeps config.remote alive.
  pool->setClientFactory([config](const std::string& address) {
    return std::unique_ptr<EndpointClient>(
        std::make_unique<TfServingClient>(config, *config.remote, address));
  });
  absl::Status s = pool->start(true);
  if (!s.ok()) return s;
  return std::unique_ptr<BatchBackend>(std::move(pool));
}

}  // namespace infergate::backends
