#include "frontend/grpc_inference_service.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <utility>

#include "frontend/encode_guard.h"
#include "frontend/grpc_framing.h"
#include "frontend/grpc_infer_stream.h"
#include "frontend/grpc_kserve_codec.h"
#include "frontend/status_map.h"
#include "frontend/tenants.h"
#include "frontend/tf_predict_codec.h"
#include "frontend/tf_predict_stream.h"
#include "grpc_service.pb.h"
#include "tf_predict.pb.h"

namespace infergate::frontend {
namespace {

using backends::DataType;

constexpr std::string_view kKserve = "/inference.GRPCInferenceService/";
constexpr std::string_view kTfPredict = "/tensorflow.serving.PredictionService/Predict";

GrpcReply framedReply(const google::protobuf::MessageLite& m) {
  GrpcReply r;
  const size_t n = m.ByteSizeLong();
  r.framed.resize(kGrpcPrefixBytes + n);
  writeGrpcPrefix(r.framed.data(), static_cast<uint32_t>(n));
  m.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(r.framed.data() + kGrpcPrefixBytes));
  return r;
}

GrpcReply errorReply(absl::StatusCode code, std::string message) {
  GrpcReply r;
  r.code = code;
  r.message = std::move(message);
  return r;
}
GrpcReply errorReply(const absl::Status& st) {
  GrpcReply r = errorReply(st.code(), std::string(st.message()));
  r.retry_after_s = retryAfterFor(st).value_or(0);
  return r;
}

template <typename M>
bool parse(std::string_view bytes, M& m) {
  return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

std::string unknownModel(std::string_view name, std::string_view version) {
  std::string msg = "Request for unknown model: '" + std::string(name) + "'";
  if (!version.empty()) msg += " version '" + std::string(version) + "'";
  return msg + " is not found";
}

// --- TF Serving tensors -----------------------------------------------------------------------

tensorflow::DataType toTf(DataType t) {
  return static_cast<tensorflow::DataType>(backends::tfDataType(t));
}

void tensorToTf(const backends::Tensor& t, tensorflow::TensorProto& tp) {
  tp.set_dtype(toTf(t.dtype));
  for (int64_t d : t.shape) tp.mutable_tensor_shape()->add_dim()->set_size(d);
  if (t.dtype != DataType::kBytes) {
    tp.set_tensor_content(std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size()));
    return;
  }
  size_t off = 0;
  while (off + 4 <= t.data.size()) {
    uint32_t len;
    std::memcpy(&len, t.data.data() + off, 4);
    off += 4;
    if (off + len > t.data.size()) break;
    tp.add_string_val(reinterpret_cast<const char*>(t.data.data() + off), len);
    off += len;
  }
}

}  // namespace

InferenceGrpcServices::InferenceGrpcServices(const backends::ModelRegistry& registry,
                                             ServerInfo info, ServerMetrics* metrics)
    : registry_(registry), info_(std::move(info)), metrics_(metrics) {}

GrpcMethod InferenceGrpcServices::resolve(std::string_view path) const {
  GrpcMethod m;
  if (path == kTfPredict) {
    m.id = kPredict;
    m.protocol = net::Protocol::kGrpcTfServing;
    m.streaming_decode = true;  // PredictSink for split messages
    m.limited = true;
    return m;
  }
  if (path.substr(0, kKserve.size()) != kKserve) return m;
  const std::string_view name = path.substr(kKserve.size());
  static constexpr std::pair<std::string_view, Method> kMethods[] = {
      {"ServerLive", kServerLive},         {"ServerReady", kServerReady},
      {"ModelReady", kModelReady},         {"ServerMetadata", kServerMetadata},
      {"ModelMetadata", kModelMetadata},   {"ModelInfer", kModelInfer},
      {"ModelStreamInfer", kModelStreamInfer}};
  for (const auto& [n, id] : kMethods) {
    if (n == name) {
      m.id = id;
      m.client_streaming = id == kModelStreamInfer;
      m.streaming_decode = id == kModelInfer;  // ModelInferSink for split messages
      m.limited = id == kModelInfer || id == kModelStreamInfer;
    }
  }
  return m;
}

void InferenceGrpcServices::call(const GrpcMethod& method, GrpcCall& call,
                                 std::string_view message, GrpcRespond respond) {
  const auto invalid = [&](std::string_view what) {
    respond(errorReply(absl::StatusCode::kInvalidArgument,
                       "failed to parse " + std::string(what)));
  };
  switch (method.id) {
    case kServerLive: {
      inference::ServerLiveResponse r;
      r.set_live(true);
      return respond(framedReply(r));
    }
    case kServerReady: {
      inference::ServerReadyResponse r;
      r.set_ready(registry_.allReady());
      return respond(framedReply(r));
    }
    case kModelReady: {
      inference::ModelReadyRequest req;
      if (!parse(message, req)) return invalid("ModelReadyRequest");
      const backends::Model* m = registry_.find(req.name(), req.version());
      if (metrics_ != nullptr && m != nullptr) call.model_index = metrics_->modelIndex(req.name());
      inference::ModelReadyResponse r;
      r.set_ready(m != nullptr && m->ready());
      return respond(framedReply(r));
    }
    case kServerMetadata: {
      inference::ServerMetadataResponse r;
      r.set_name(info_.name);
      r.set_version(info_.version);
      r.add_extensions("parameters");
      r.add_extensions("schedule_policy");
      return respond(framedReply(r));
    }
    case kModelMetadata: {
      inference::ModelMetadataRequest req;
      if (!parse(message, req)) return invalid("ModelMetadataRequest");
      const backends::Model* m = registry_.find(req.name(), req.version());
      if (m == nullptr) {
        return respond(
            errorReply(absl::StatusCode::kNotFound, unknownModel(req.name(), req.version())));
      }
      if (metrics_ != nullptr) call.model_index = metrics_->modelIndex(req.name());
      const backends::ModelConfig& c = m->config();
      inference::ModelMetadataResponse r;
      r.set_name(c.name);
      r.add_versions(c.version);
      r.set_platform(c.platform);
      auto fill = [&](const backends::TensorSpec& s,
                      inference::ModelMetadataResponse::TensorMetadata* tm) {
        tm->set_name(s.name);
        tm->set_datatype(std::string(backends::dataTypeName(s.dtype)));
        for (int64_t d : c.fullShape(s)) tm->add_shape(d);
      };
      for (const auto& s : c.inputs) fill(s, r.add_inputs());
      for (const auto& s : c.outputs) fill(s, r.add_outputs());
      return respond(framedReply(r));
    }
    case kModelInfer: return modelInfer(call, message, std::move(respond), false);
    case kModelStreamInfer: return modelInfer(call, message, std::move(respond), true);
    case kPredict: return predict(call, message, std::move(respond));
    default:
      return respond(errorReply(absl::StatusCode::kUnimplemented, "unknown method"));
  }
}

absl::Status InferenceGrpcServices::admitHeader(GrpcCall& call, backends::InferRequest& header,
                                                backends::Model*& model) {
  model = registry_.find(header.model_name, header.model_version);
  if (model == nullptr || !model->ready()) return absl::OkStatus();  // answered after decoding
  if (metrics_ != nullptr) call.model_index = metrics_->modelIndex(header.model_name);
  // The model's limits the header already decides, before anything is placed or reserved for
  // the bytes it announces (validateRequest runs again once they came).
  if (absl::Status st = backends::validateRequestHeader(model->config(), header); !st.ok()) {
    return st;
  }
  absl::StatusOr<int64_t> prio =
      resolvePriority(header.priority, call.priority_metadata ? &*call.priority_metadata : nullptr,
                      call.priority_class, model->priorityLevels(), call.priority_trusted);
  if (prio.ok()) {
    // Refuse before copying: what enqueue would answer, before any tensor byte is written.
    if (absl::Status st = model->admission(*prio); !st.ok()) return st;
  }
  model->placeInputs(header);
  return absl::OkStatus();
}

// ModelInfer's streaming decode: raw_input_contents go from each DATA chunk straight into the
// model's batch slots; the header is admitted (refused before copying) and placed first.
class InferenceGrpcServices::ModelInferSink final : public GrpcMessageSink {
 public:
  ModelInferSink(InferenceGrpcServices& services, GrpcCall& call)
      : services_(services),
        hook_([this, &call](backends::InferRequest& r) {
          return services_.admitHeader(call, r, model_);
        }) {}

  void begin(uint32_t size) override {
    model_ = nullptr;
    decoder_.begin(size, &hook_);
  }
  absl::Status piece(const char* data, size_t len, bool copied) override {
    return decoder_.piece(data, len, copied);
  }
  void end(GrpcCall& call, GrpcRespond respond) override {
    backends::InferRequest req;
    absl::Status st = decoder_.finish(req);
    services_.answerInfer(call, std::move(st), std::move(req), model_, std::move(respond), false);
  }
  size_t bufferedBytes() const override { return decoder_.bufferedBytes(); }
  uint64_t gatheredBytes() const override { return decoder_.gatheredBytes(); }

 private:
  InferenceGrpcServices& services_;
  backends::Model* model_ = nullptr;
  const HeaderHook hook_;
  ModelInferStreamDecoder decoder_;
};

// Predict's streaming decode: a tensor_content that ends the message goes from each DATA chunk
// straight into the model's batch slot, after the model is found, admits the request (refuse
// before copying) and the input is placed; any other message is gathered and decoded whole.
class InferenceGrpcServices::PredictSink final : public GrpcMessageSink {
 public:
  PredictSink(InferenceGrpcServices& services, GrpcCall& call)
      : services_(services),
        hook_([this, &call](PredictRequestScan& scan,
                            backends::InferRequest& req) -> absl::StatusOr<bool> {
          backends::Model* model = nullptr;
          const absl::Status st = services_.admitPredict(call, scan, model);
          // Not found or not ready: the whole decode gives that answer.
          if (model == nullptr || !model->ready()) return false;
          if (!st.ok()) return st;  // refused before copying
          const backends::InputPlacer place = [model](backends::InferRequest& r) {
            return model->placeInputs(r);
          };
          if (!decodePredictInputs(scan, model->config(), req, &place).ok()) return false;
          model_ = model;
          return true;
        }) {}

  void begin(uint32_t size) override {
    model_ = nullptr;
    decoder_.begin(size, &hook_);
  }
  absl::Status piece(const char* data, size_t len, bool copied) override {
    return decoder_.piece(data, len, copied);
  }
  void end(GrpcCall& call, GrpcRespond respond) override {
    PredictStreamDecoder::Result r = decoder_.finish();
    if (!r.status.ok()) {
      decoder_.reset();
      return respond(errorReply(r.status));
    }
    if (r.streamed) {
      decoder_.reset();
      return services_.answerPredict(call, std::move(r.request), model_, std::move(respond));
    }
    services_.predict(call, r.whole, std::move(respond), r.copies_before);
    decoder_.reset();  // the gathered message goes
  }
  size_t bufferedBytes() const override { return decoder_.bufferedBytes(); }
  uint64_t gatheredBytes() const override { return decoder_.gatheredBytes(); }

 private:
  InferenceGrpcServices& services_;
  backends::Model* model_ = nullptr;
  const PredictStreamHook hook_;
  PredictStreamDecoder decoder_;
};

std::unique_ptr<GrpcMessageSink> InferenceGrpcServices::openSink(const GrpcMethod& method,
                                                                 GrpcCall& call) {
  if (method.id == kPredict) return std::make_unique<PredictSink>(*this, call);
  if (method.id != kModelInfer) return nullptr;
  return std::make_unique<ModelInferSink>(*this, call);
}

void InferenceGrpcServices::modelInfer(GrpcCall& call, std::string_view message,
                                       GrpcRespond respond, bool stream) {
  // One copy: raw_input_contents (and typed contents) go from the message bytes straight into
  // the model's batch slots, once the header names the model and it admits the request.
  backends::Model* model = nullptr;
  const HeaderHook hook = [&](backends::InferRequest& r) { return admitHeader(call, r, model); };
  backends::InferRequest req;
  absl::Status st = decodeModelInferRequest(message, req, nullptr, &hook);
  answerInfer(call, std::move(st), std::move(req), model, std::move(respond), stream);
}

void InferenceGrpcServices::answerInfer(GrpcCall& call, absl::Status decoded,
                                        backends::InferRequest&& req, backends::Model* model,
                                        GrpcRespond respond, bool stream) {
  // In a stream, errors of one request are reported in its response message and the stream
  // goes on (Triton's ModelStreamInfer).
  auto fail = [stream](const absl::Status& st) {
    if (!stream) return errorReply(st);
    GrpcReply r;
    encodeModelStreamInferResponse(nullptr, std::string(st.message()), r.framed);
    return r;
  };
  if (!decoded.ok()) return respond(fail(decoded));
  if (model == nullptr) model = registry_.find(req.model_name, req.model_version);
  if (model == nullptr) {
    return respond(fail(absl::NotFoundError(unknownModel(req.model_name, req.model_version))));
  }
  if (metrics_ != nullptr) call.model_index = metrics_->modelIndex(req.model_name);
  if (!model->ready()) {
    return respond(fail(absl::UnavailableError("model '" + req.model_name + "' is not ready")));
  }
  const backends::ModelConfig& cfg = model->config();
  if (absl::Status st = backends::validateRequest(cfg, req); !st.ok()) return respond(fail(st));
  // Sequence affinity by metadata, as the REST path by header: the model's sequence_id_header
  // carries a (string) sequence id; the sequence_id parameter wins.
  if (const std::string_view name = backends::sequenceIdHeader(cfg);
      !name.empty() && !req.sequence.active()) {
    std::string lower(name);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (const std::string* v = call.customMetadata(lower); v != nullptr && !v->empty()) {
      if (v->size() > 256) {
        return respond(fail(absl::InvalidArgumentError(
            lower + " must be at most 256 bytes (a sequence id)")));
      }
      req.sequence.id = *v;
      req.sequence.id_is_string = true;
    }
  }
  if (req.sequence.active()) req.sequence.owner = sequenceOwner(call.tenant, call.peer);
  {
    // As the REST path: parameter, then x-infergate-priority metadata, then the ingress tag.
    absl::StatusOr<int64_t> prio =
        resolvePriority(req.priority,
                        call.priority_metadata ? &*call.priority_metadata : nullptr,
                        call.priority_class, model->priorityLevels(), call.priority_trusted);
    if (!prio.ok()) return respond(fail(prio.status()));
    req.priority = *prio;
  }
  if (call.timeout_ns != 0) {
    const uint64_t us = (call.timeout_ns + 999) / 1000;
    if (req.timeout_us == 0 || us < req.timeout_us) req.timeout_us = us;
  }
  req.cancel = call.cancel;
  model->infer(std::move(req), [respond = std::move(respond), stream, version = cfg.version](
                                   absl::StatusOr<backends::InferResponse> result) mutable {
    if (!result.ok()) {
      if (!stream) return respond(errorReply(result.status()));
      GrpcReply r;
      encodeModelStreamInferResponse(nullptr, std::string(result.status().message()), r.framed);
      return respond(std::move(r));
    }
    if (result->model_version.empty()) result->model_version = version;
    respond(encodeGuarded(
        [&] {
          GrpcReply r;
          if (stream) {
            encodeModelStreamInferResponse(&*result, {}, r.framed);
          } else {
            encodeModelInferResponse(*result, r.framed);
          }
          return r;
        },
        [&](const absl::Status& st) {
          if (!stream) return errorReply(st);
          GrpcReply r;  // a stream's failed request is its error_message; the stream goes on
          encodeModelStreamInferResponse(nullptr, std::string(st.message()), r.framed);
          return r;
        }));
  });
}

absl::Status InferenceGrpcServices::admitPredict(GrpcCall& call, const PredictRequestScan& scan,
                                                 backends::Model*& model) {
  const std::string& name = scan.spec.name;
  const std::string& version = scan.spec.version;
  model = registry_.find(name, version);
  if (model == nullptr) {
    const std::string which =
        version.empty() ? "Latest(" + name + ")" : "Specific(" + name + ", " + version + ")";
    return absl::NotFoundError("Servable not found for request: " + which);
  }
  if (metrics_ != nullptr) call.model_index = metrics_->modelIndex(name);
  if (!model->ready()) return absl::UnavailableError("model '" + name + "' is not ready");
  // Refuse before copying (Predict carries no priority: the default level).
  return model->admission(0);
}

void InferenceGrpcServices::predict(GrpcCall& call, std::string_view message,
                                    GrpcRespond respond, int copies_before) {
  // The wire decoder (tf_predict_codec.h): the message is checked as libprotobuf would, then
  // the inputs are decoded with one write per tensor byte into the model's slots.
  PredictRequestScan scan;
  if (absl::Status st = scanPredictRequest(message, scan); !st.ok()) {
    return respond(errorReply(st));
  }
  backends::Model* model = nullptr;
  if (absl::Status st = admitPredict(call, scan, model); !st.ok()) {
    return respond(errorReply(st));
  }
  const backends::ModelConfig& cfg = model->config();
  backends::InferRequest req;
  const backends::InputPlacer place = [model](backends::InferRequest& r) {
    return model->placeInputs(r);
  };
  uint64_t copied = 0;
  if (absl::Status st = decodePredictInputs(scan, cfg, req, &place, &copied); !st.ok()) {
    return respond(errorReply(st));
  }
  req.received_copy_bytes = copied * static_cast<uint64_t>(copies_before);
  answerPredict(call, std::move(req), model, std::move(respond));
}

void InferenceGrpcServices::answerPredict(GrpcCall& call, backends::InferRequest&& req,
                                          backends::Model* model, GrpcRespond respond) {
  const backends::ModelConfig& cfg = model->config();
  if (absl::Status st = backends::validateRequest(cfg, req); !st.ok()) {
    return respond(errorReply(st));
  }
  if (call.timeout_ns != 0) req.timeout_us = (call.timeout_ns + 999) / 1000;
  req.cancel = call.cancel;
  std::string name = req.model_name;
  model->infer(std::move(req), [respond = std::move(respond), name = std::move(name),
                                version = cfg.version](
                                   absl::StatusOr<backends::InferResponse> result) {
    if (!result.ok()) return respond(errorReply(result.status()));
    respond(encodeGuarded(
        [&] {
          tensorflow::serving::PredictResponse resp;
          resp.mutable_model_spec()->set_name(name);
          int64_t v = 0;
          if (!version.empty() && std::all_of(version.begin(), version.end(), ::isdigit)) {
            v = std::stoll(version);
            resp.mutable_model_spec()->mutable_version()->set_value(v);
          }
          resp.mutable_model_spec()->set_signature_name("serving_default");
          for (const backends::Tensor& t : result->outputs) {
            bool want = result->requested.empty();
            for (const auto& ro : result->requested) want = want || ro.name == t.name;
            if (want) tensorToTf(t, (*resp.mutable_outputs())[t.name]);
          }
          return framedReply(resp);
        },
        [](const absl::Status& st) { return errorReply(st); }));
  });
}

}  // namespace infergate::frontend
