#pragma once
// The libprotobuf-based TF Serving Predict decode as frontend/grpc_inference_service.cc did it
// before issue 16 (ParseFromArray, then tensorFromTf per model input, the unknown-alias check,
// output_filter): the reference the wire decoder (frontend/tf_predict_codec.h) is compared with
// in tests/unit/frontend/tf_predict_codec_test.cc and tests/fuzz/tf_predict_fuzz.cc.

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "backends/model.h"
#include "common/checked.h"
#include "frontend/tf_predict_codec.h"
#include "tf_predict.pb.h"

namespace infergate::frontend::reference {

using backends::DataType;

inline constexpr uint64_t kMaxTfBroadcastBytes = 64ull << 20;

template <typename Out, typename Rep>
absl::Status appendTyped(const std::string& name, const Rep& values, uint64_t count,
                         std::vector<uint8_t>& data) {
  const uint64_t n = values.size() == 1 && count > 1 ? count : static_cast<uint64_t>(values.size());
  uint64_t bytes = 0;
  if (!common::checkedMul(n, static_cast<uint64_t>(sizeof(Out)), bytes) ||
      (n != static_cast<uint64_t>(values.size()) && bytes > kMaxTfBroadcastBytes)) {
    return absl::InvalidArgumentError("input '" + name + "': broadcasting one value over " +
                                      std::to_string(count) + " elements exceeds " +
                                      std::to_string(kMaxTfBroadcastBytes) + " bytes");
  }
  data.resize(bytes);
  for (uint64_t i = 0; i < n; ++i) {
    const Out v = static_cast<Out>(values.Get(values.size() == 1 ? 0 : static_cast<int>(i)));
    std::memcpy(data.data() + i * sizeof(Out), &v, sizeof(Out));
  }
  return absl::OkStatus();
}

inline absl::Status tensorFromTf(const std::string& name, const tensorflow::TensorProto& tp,
                                 const backends::ModelConfig& cfg,
                                 const backends::TensorSpec& spec, backends::Tensor& t) {
  std::optional<DataType> dt = backends::fromTfDataType(static_cast<int>(tp.dtype()));
  if (!dt) {
    return absl::InvalidArgumentError("input '" + name + "': unsupported dtype " +
                                      tensorflow::DataType_Name(tp.dtype()));
  }
  t.name = name;
  t.dtype = *dt;
  for (const auto& d : tp.tensor_shape().dim()) t.shape.push_back(d.size());
  if (absl::Status st = backends::checkInputShape(cfg, spec, t.dtype, t.shape); !st.ok()) {
    return st;
  }
  const uint64_t count = backends::elementCount(t.shape).value_or(0);
  if (!tp.tensor_content().empty()) {
    if (*dt == DataType::kBytes) {
      return absl::InvalidArgumentError("input '" + name + "': DT_STRING needs string_val");
    }
    t.data.assign(tp.tensor_content().begin(), tp.tensor_content().end());
    return absl::OkStatus();
  }
  switch (*dt) {
    case DataType::kFp32: return appendTyped<float>(name, tp.float_val(), count, t.data);
    case DataType::kFp64: return appendTyped<double>(name, tp.double_val(), count, t.data);
    case DataType::kInt32: return appendTyped<int32_t>(name, tp.int_val(), count, t.data);
    case DataType::kInt16: return appendTyped<int16_t>(name, tp.int_val(), count, t.data);
    case DataType::kInt8: return appendTyped<int8_t>(name, tp.int_val(), count, t.data);
    case DataType::kUint8: return appendTyped<uint8_t>(name, tp.int_val(), count, t.data);
    case DataType::kUint16: return appendTyped<uint16_t>(name, tp.int_val(), count, t.data);
    case DataType::kInt64: return appendTyped<int64_t>(name, tp.int64_val(), count, t.data);
    case DataType::kBool: return appendTyped<uint8_t>(name, tp.bool_val(), count, t.data);
    case DataType::kFp16:
    case DataType::kBf16: return appendTyped<uint16_t>(name, tp.half_val(), count, t.data);
    case DataType::kUint32: return appendTyped<uint32_t>(name, tp.uint32_val(), count, t.data);
    case DataType::kUint64: return appendTyped<uint64_t>(name, tp.uint64_val(), count, t.data);
    case DataType::kBytes:
      for (const std::string& s : tp.string_val()) {
        const uint32_t len = static_cast<uint32_t>(s.size());
        const size_t at = t.data.size();
        t.data.resize(at + 4 + s.size());
        std::memcpy(t.data.data() + at, &len, 4);
        std::memcpy(t.data.data() + at + 4, s.data(), s.size());
      }
      break;
  }
  return absl::OkStatus();
}

// The former predict() up to validateRequest, for model `cfg` (the lookup by name aside).
// `unknown_aliases` receives every map key that is no input of the model (the former code
// named the first in the map's hash order, so only the set is comparable).
inline absl::Status decode(std::string_view wire, const backends::ModelConfig& cfg,
                           backends::InferRequest& req, PredictModelSpec* spec = nullptr,
                           std::vector<std::string>* unknown_aliases = nullptr) {
  tensorflow::serving::PredictRequest pr;
  if (!pr.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return absl::InvalidArgumentError("failed to parse PredictRequest");
  }
  const std::string& name = pr.model_spec().name();
  const std::string version =
      pr.model_spec().has_version() ? std::to_string(pr.model_spec().version().value()) : "";
  if (spec != nullptr) {
    spec->name = name;
    spec->version = version;
    spec->has_version = pr.model_spec().has_version();
    spec->version_label = pr.model_spec().version_label();
    spec->signature_name = pr.model_spec().signature_name();
  }
  req.protocol = net::Protocol::kGrpcTfServing;
  req.model_name = name;
  req.model_version = version;
  req.binary_data_output = true;
  for (const backends::TensorSpec& s : cfg.inputs) {
    auto it = pr.inputs().find(s.name);
    if (it == pr.inputs().end()) continue;
    if (absl::Status st = tensorFromTf(it->first, it->second, cfg, s, req.inputs.emplace_back());
        !st.ok()) {
      return st;
    }
  }
  absl::Status alias = absl::OkStatus();
  for (const auto& [a, tp] : pr.inputs()) {
    bool known = false;
    for (const backends::TensorSpec& s : cfg.inputs) known = known || s.name == a;
    if (!known) {
      if (unknown_aliases != nullptr) unknown_aliases->push_back(a);
      if (alias.ok()) {
        alias = absl::InvalidArgumentError("input '" + a + "' is not an input of model '" +
                                           name + "'");
      }
    }
  }
  if (!alias.ok()) return alias;
  for (const std::string& f : pr.output_filter()) req.outputs.push_back({f, true});
  return absl::OkStatus();
}

}  // namespace infergate::frontend::reference
