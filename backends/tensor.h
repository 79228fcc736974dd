#pragma once
// Tensor and inference request/response types shared by every frontend codec and backend.
// Threading: plain values; a request is owned by one thread at a time and moved between them.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/cancel_token.h"
#include "net/protocol.h"

namespace infergate::backends {

// KServe v2 datatypes (the API names; Triton's TYPE_STRING is BYTES).
enum class DataType : uint8_t {
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64,
  kBytes,
};
inline constexpr int kNumDataTypes = 14;

// "FP32" -> kFp32; nullopt for an unknown name. Case-sensitive, as the protocol is.
std::optional<DataType> parseDataType(std::string_view name);
std::string_view dataTypeName(DataType t);
// Bytes per element; 0 for BYTES (variable length).
size_t dataTypeSize(DataType t);

// Number of elements of a shape; nullopt when a dimension is negative or the product overflows.
std::optional<uint64_t> elementCount(const std::vector<int64_t>& shape);
// Bytes of a fixed-size tensor (elements x element size, checked); nullopt for BYTES, a negative
// dimension or an overflow. Every size computed from a client's shape goes through this.
std::optional<uint64_t> tensorByteSize(const std::vector<int64_t>& shape, DataType t);
std::string shapeToString(const std::vector<int64_t>& shape);

// A tensor as declared in configuration / metadata. -1 marks a variable dimension.
struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kFp32;
  std::vector<int64_t> shape;
};

// A tensor with data. `data` holds the elements little-endian, row-major, unpadded; for BYTES
// each element is a 4-byte little-endian length followed by its bytes (the binary tensor
// extension's layout), so every codec and backend shares one representation.
//
// One-copy placement (docs/BATCHING.md, "One copy"): when `slot` is set, the elements live in a
// slot of a batch buffer (pinned memory) that the request's InferRequest::slots reservation owns,
// `slot_bytes` long, and `data` is empty. Decoders set `slot_bytes` to the size they need before
// asking the model to place the inputs (Model::placeInputs), then write the elements into `slot`.
// Read the bytes through bytes()/byteSize(), which work for both storages.
struct Tensor {
  std::string name;
  DataType dtype = DataType::kFp32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  uint8_t* slot = nullptr;
  size_t slot_bytes = 0;

  const uint8_t* bytes() const { return slot != nullptr ? slot : data.data(); }
  uint8_t* mutableBytes() { return slot != nullptr ? slot : data.data(); }
  size_t byteSize() const { return slot != nullptr ? slot_bytes : data.size(); }
};

// The reservation behind Tensor::slot of a request's inputs: destroying it releases the slots.
// Implemented by the batcher; opaque to codecs.
class InputSlots {
 public:
  virtual ~InputSlots() = default;
};

struct RequestedOutput {
  std::string name;
  bool binary = false;  // KServe binary tensor extension: return raw bytes, not JSON
};

struct InferRequest {
  std::string model_name;
  std::string model_version;  // empty: the model's default version
  std::string id;
  std::vector<Tensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty: all outputs, per binary_data_output
  bool binary_data_output = false;
  int64_t priority = 0;    // KServe "priority": 0 = default level, 1 = highest
  uint64_t timeout_us = 0; // KServe "timeout": 0 = none
  net::Protocol protocol = net::Protocol::kHttpKserve;
  // One-copy reservation owning the inputs' slots (null when no input has a slot).
  std::shared_ptr<InputSlots> slots;
  // Set by connections that can tell when their client goes away (null: never cancelled).
  std::shared_ptr<net::CancelToken> cancel;
};

struct InferResponse {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<Tensor> outputs;
  std::vector<RequestedOutput> requested;  // copied from the request: which outputs, binary or not
  bool binary_data_output = false;
};

}  // namespace infergate::backends
