#pragma once
// TF Serving gRPC Predict (tensorflow.serving.PredictionService/Predict) request decoder without
// libprotobuf objects for the tensor bytes: one copy of every tensor byte, from the message
// bytes straight into the model's batch slot (docs/BATCHING.md "One copy").
//
// Two steps, so the caller can look the model up and ask Model::admission before any tensor
// byte is touched:
// 1. scanPredictRequest reads the PredictRequest wire format (common/protowire.h's constants,
//    its own cursor with libprotobuf 3.21's limits on keys, lengths and group depth) and keeps
//    views into the message: model_spec, the inputs map (dtype, shape, tensor_content and the
//    typed *_val fields as views), output_filter. It accepts exactly the messages libprotobuf's
//    ParseFromArray accepts (unknown fields and groups skipped, a known field number with a wire
//    type of another kind skipped as unknown, packed or unpacked repeated values, messages
//    merged and scalars overwritten as they recur, map entries with key/value in any order and
//    the last entry of a key winning, proto3 strings checked as UTF-8), else it answers
//    INVALID_ARGUMENT "failed to parse PredictRequest", today's error.
// 2. decodePredictInputs decodes the scanned inputs against the model's configuration, with the
//    rules and error messages of the former libprotobuf decode (tensorFromTf): inputs in the
//    model's order; dtype, then the shape against the model (checkInputShape) before any size is
//    computed; tensor_content as the bytes (never for DT_STRING); else the typed values of the
//    dtype (float_val, double_val, int_val, int64_val, bool_val, half_val, uint32_val,
//    uint64_val, string_val), one value broadcast over the shape (at most 64 MiB of it); a map
//    key that is no input of the model is refused. Header pass first (every size into
//    Tensor::slot_bytes, checked arithmetic), then `place` (Model::placeInputs), then the write
//    pass: tensor_content is one memcpy from the wire into the slot, typed values are converted
//    straight into the slot's elements (BYTES: 4-byte LE length + bytes). Not placed: the same
//    writes into Tensor::data. validateRequest is the caller's, after.
//
// Threading: plain functions; the scan's views live as long as the message bytes.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "backends/model.h"
#include "backends/tensor.h"

namespace infergate::frontend {

// model_spec as the message names it.
struct PredictModelSpec {
  std::string name;
  // The version the request asks for: the decimal Int64Value when `version` is set, else "".
  std::string version;
  bool has_version = false;
  std::string version_label;  // kept, not used for the lookup (today's behaviour)
  std::string signature_name;
};

// One TensorProto of the inputs map, as views into the message. The typed values are not
// kept element by element (a hostile message of one-byte unpacked elements would make the scan
// several times its size): only their counts; the write pass reads them again from `messages`.
struct TfTensorView {
  std::string_view name;  // the map key
  int32_t dtype = 0;
  std::vector<int64_t> shape;
  std::string_view content;                // tensor_content (last occurrence)
  // > 0: a tensor_content of this many bytes that is not in `content` (empty): the streaming
  // decoder (tf_predict_stream.h) writes it into the slot itself; the write pass leaves it.
  uint64_t streamed_content = 0;
  std::vector<std::string_view> messages;  // the value's TensorProto bytes (several: merged)
  std::array<uint64_t, 9> counts{};        // elements per typed value field
  uint64_t string_bytes = 0;               // string_val as BYTES elements (4 + length each)
};

struct PredictRequestScan {
  PredictModelSpec spec;
  std::vector<TfTensorView> inputs;  // one per distinct key, in wire order of its last entry
  std::vector<std::string_view> output_filter;
};

// Step 1 (no tensor byte copied). `out` is overwritten.
absl::Status scanPredictRequest(std::string_view wire, PredictRequestScan& out);

// Step 2: fills `out` (protocol kGrpcTfServing, model_name/version from the scan, binary
// outputs, output_filter, received_copy_bytes 0) with the inputs of `cfg` the message carries.
// `copied_bytes`, when given, receives the tensor bytes written.
absl::Status decodePredictInputs(const PredictRequestScan& scan, const backends::ModelConfig& cfg,
                                 backends::InferRequest& out,
                                 const backends::InputPlacer* place = nullptr,
                                 uint64_t* copied_bytes = nullptr);

// TF's DataType_Name for the error messages ("DT_FLOAT"; "" for a number outside the enum).
std::string_view tfDataTypeName(int32_t dtype);

}  // namespace infergate::frontend
