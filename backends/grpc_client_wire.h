#pragma once
// Protobuf wire encoding and decoding of the few messages the remote backends exchange
// (KServe v2 / Triton `inference.GRPCInferenceService`, TF Serving `PredictionService`), written
// by hand over the field numbers of frontend/proto/*.proto (which match Triton's and TF
// Serving's own protos). Why not the generated classes: a protobuf `bytes` field owns a copy,
// while here a request is a header (names, shapes, parameters) plus tensor bytes that stay in
// the batch buffers and reach gRPC as slices of existing memory (see ModelInferEncoding), and
// responses are decoded into views of the received buffer.
//
// Threading: plain functions and values.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/tensor.h"
#include "common/protowire.h"

namespace infergate::backends::wire {

// The protobuf wire primitives (common/protowire.h), shared with the gRPC frontend.
using common::protowire::putPackedInt64;
using common::protowire::putString;
using common::protowire::putTag;
using common::protowire::putVarint;
using common::protowire::putVarintField;
using common::protowire::Reader;
using common::protowire::readInt64s;
using common::protowire::varintSize;

// --- KServe v2 ----------------------------------------------------------------------------------

// ModelReadyRequest / ModelMetadataRequest {name=1, version=2}; also the shm Status/Unregister
// requests {name=1}.
std::string encodeNameVersion(std::string_view name, std::string_view version);
// SystemSharedMemoryRegisterRequest{name=1, key=2, offset=3, byte_size=4}.
std::string encodeSystemShmRegister(std::string_view name, std::string_view key, uint64_t offset,
                                    uint64_t byte_size);
// CudaSharedMemoryRegisterRequest{name=1, raw_handle=2, device_id=3, byte_size=4}.
std::string encodeCudaShmRegister(std::string_view name, std::string_view raw_handle,
                                  int64_t device_id, uint64_t byte_size);
// ServerReadyResponse / ModelReadyResponse {ready=1}.
absl::StatusOr<bool> decodeReady(std::string_view msg);

struct TensorMetadata {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};
struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;
  std::vector<TensorMetadata> inputs;
  std::vector<TensorMetadata> outputs;
};
absl::StatusOr<ModelMetadata> decodeModelMetadata(std::string_view msg);

// One input of a ModelInferRequest: the tensor bytes are either sent as raw_input_contents
// (`data`, referenced, not copied) or left in a registered shared memory region.
struct InferInput {
  std::string_view name;
  DataType dtype = DataType::kFp32;
  const std::vector<int64_t>* shape = nullptr;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::string_view shm_region;  // non-empty: shared memory, `data` unused
  uint64_t shm_offset = 0;
};
struct InferOutput {
  std::string_view name;
  std::string_view shm_region;  // non-empty: the server writes the output there
  uint64_t shm_offset = 0;
  uint64_t shm_bytes = 0;
};
struct InferParams {
  std::string_view model_name;
  std::string_view model_version;
  std::string_view id;
  int64_t priority = 0;     // forwarded when > 0
  uint64_t timeout_us = 0;  // forwarded when > 0
  // Triton's sequence batcher (forwarded when sequence_id is not empty): sequence_id as
  // string_param when sequence_id_is_string, else int64_param (decimal text here, parsed);
  // sequence_start / sequence_end as bool_param when set.
  std::string_view sequence_id;
  bool sequence_id_is_string = false;
  bool sequence_start = false;
  bool sequence_end = false;
};

// A ModelInferRequest as a sequence of pieces: `meta` holds every byte the encoder produced
// (header fields, then per raw input its tag and length); `pieces` lists, in wire order, either a
// range of `meta` or external tensor memory. Concatenated, they are the serialized message.
struct ModelInferEncoding {
  struct Piece {
    bool external = false;
    size_t offset = 0;  // into meta (external == false)
    const uint8_t* data = nullptr;  // external == true
    size_t size = 0;
  };
  std::string meta;
  std::vector<Piece> pieces;
  size_t raw_bytes = 0;  // tensor bytes carried in the message
  size_t totalBytes() const;
  std::string flatten() const;  // for tests
};
void encodeModelInfer(const InferParams& params, const std::vector<InferInput>& inputs,
                      const std::vector<InferOutput>& outputs, ModelInferEncoding& out);

struct InferResponseOutput {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  const uint8_t* raw = nullptr;  // view of the response buffer; nullptr when not raw (shm)
  size_t raw_bytes = 0;
};
// Outputs of a ModelInferResponse; raw_output_contents[i] belongs to outputs[i]. Views point
// into `msg`.
absl::StatusOr<std::vector<InferResponseOutput>> decodeModelInferResponse(std::string_view msg);

// --- TF Serving ---------------------------------------------------------------------------------

// (tfDataType / fromTfDataType, the datatype mapping, are in backends/tensor.h.)
// "DT_FLOAT", "DT_STRING", ...; "DT_<n>" for a number this file does not name.
std::string tfDataTypeName(int tf);

// The elements of a BYTES tensor buffer (each a 4-byte little-endian length, then that many
// bytes: backends/tensor.h) as views into it; nullopt unless the buffer is exactly such a
// sequence.
std::optional<std::vector<std::string_view>> splitBytesTensor(const uint8_t* data, size_t size);

struct TfModelSpec {
  std::string_view name;
  int64_t version = -1;  // < 0: latest
  std::string_view signature_name;
};
// PredictRequest with tensor_content; pieces as for ModelInfer (tensor bytes referenced). BYTES
// inputs go as DT_STRING string_val, one field per element, copied into `meta` (check their
// buffers with splitBytesTensor first: a malformed one is sent as its well-formed prefix).
void encodePredict(const TfModelSpec& spec, const std::vector<InferInput>& inputs,
                   const std::vector<std::string_view>& output_filter, ModelInferEncoding& out);
// PredictResponse outputs (map order) with tensor_content views into `msg`. DT_STRING outputs
// (string_val) are laid out as BYTES buffers (4-byte length + bytes per element) in
// `string_storage`, which the views then point into: keep it, and `msg`, alive while the
// outputs are used. The one-argument form refuses DT_STRING outputs.
absl::StatusOr<std::vector<InferResponseOutput>> decodePredictResponse(
    std::string_view msg, std::string& string_storage);
absl::StatusOr<std::vector<InferResponseOutput>> decodePredictResponse(std::string_view msg);
// GetModelStatusRequest{model_spec=1}; decodeModelStatus: OK when some version is AVAILABLE.
std::string encodeGetModelStatus(const TfModelSpec& spec);
absl::Status decodeModelStatus(std::string_view msg);

// GetModelMetadataRequest{model_spec=1, metadata_field=2: "signature_def"}.
std::string encodeGetModelMetadata(const TfModelSpec& spec);
// A TensorInfo of a SignatureDef (tensorflow/core/protobuf/meta_graph.proto).
struct TfTensorInfo {
  std::string alias;           // the map key: the name Predict requests use
  std::string tensor_name;     // TensorInfo.name=1, the graph tensor (for messages)
  int dtype = 0;               // tensorflow.DataType, TensorInfo.dtype=2
  std::vector<int64_t> shape;  // TensorShapeProto dims (-1: unknown size)
  bool unknown_rank = false;   // TensorShapeProto.unknown_rank=3 (or no shape at all)
};
struct TfSignatureDef {
  std::string key;  // signature name, e.g. serving_default
  std::vector<TfTensorInfo> inputs;
  std::vector<TfTensorInfo> outputs;
  std::string method_name;
};
// GetModelMetadataResponse{metadata=2: map<string, Any>}: metadata["signature_def"] must be an
// Any{type_url=1 ".../tensorflow.serving.SignatureDefMap", value=2} whose SignatureDefMap{
// signature_def=1: map<string, SignatureDef{inputs=1, outputs=2, method_name=3}>} is returned,
// in wire order. INTERNAL for a malformed message or a missing / differently typed entry.
absl::StatusOr<std::vector<TfSignatureDef>> decodeGetModelMetadata(std::string_view msg);

}  // namespace infergate::backends::wire
