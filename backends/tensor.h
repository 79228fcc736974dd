#pragma once
// Tensor and inference request/response types shared by every frontend codec and backend.
// Threading: plain values; a request is owned by one thread at a time and moved between them.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
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

// One element of a BYTES tensor: a 4-byte little-endian length, then that many bytes (see
// Tensor). It has no fixed size, so it stands for the element in the traits below.
struct BytesElement {};

// The per-datatype facts, once, in enum order: the API name and the C type one element is
// stored as in Tensor::data (little-endian). BOOL is one byte, 0 or 1; FP16 and BF16 are their
// 16 raw bits; the element size is sizeof(storage), 0 for BYTES.
using DataTypeStorage = std::tuple<uint8_t, uint8_t, uint16_t, uint32_t, uint64_t, int8_t, int16_t,
                                   int32_t, int64_t, uint16_t, uint16_t, float, double, BytesElement>;
inline constexpr std::array<std::string_view, kNumDataTypes> kDataTypeNames = {
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8",  "INT16",
    "INT32", "INT64", "FP16",  "BF16",   "FP32",   "FP64",  "BYTES"};
static_assert(std::tuple_size_v<DataTypeStorage> == kNumDataTypes);

// A datatype as a type: what visitDataType passes to its function.
//   tag.value    the DataType
//   Storage      the C type of one element (above)
//   kSize        bytes per element; 0 for BYTES
//   kName        the API name
template <DataType D>
struct DataTypeTag {
  static constexpr DataType value = D;
  using Storage = std::tuple_element_t<static_cast<size_t>(D), DataTypeStorage>;
  static constexpr bool kIsBytes = D == DataType::kBytes;
  static constexpr bool kIsBool = D == DataType::kBool;
  static constexpr bool kIsFloat =
      D == DataType::kFp16 || D == DataType::kBf16 || D == DataType::kFp32 || D == DataType::kFp64;
  static constexpr bool kIsInteger = !kIsBytes && !kIsBool && !kIsFloat;
  static constexpr size_t kSize = kIsBytes ? 0 : sizeof(Storage);
  static constexpr std::string_view kName = kDataTypeNames[static_cast<size_t>(D)];
};

// The one switch over DataType: calls f(DataTypeTag<dt>{}) and returns what it returns (every
// instantiation must return the same type). Write the per-type code once, generically:
//   visitDataType(t.dtype, [&](auto tag) {
//     using T = typename decltype(tag)::Storage;
//     if constexpr (tag.kIsBytes) { ... } else { ... sizeof(T) ... }
//   });
// A value outside the enum is a broken invariant (every DataType comes from parseDataType or a
// checked table) and aborts.
template <class F>
constexpr decltype(auto) visitDataType(DataType dt, F&& f) {
  switch (dt) {
    case DataType::kBool: return f(DataTypeTag<DataType::kBool>{});
    case DataType::kUint8: return f(DataTypeTag<DataType::kUint8>{});
    case DataType::kUint16: return f(DataTypeTag<DataType::kUint16>{});
    case DataType::kUint32: return f(DataTypeTag<DataType::kUint32>{});
    case DataType::kUint64: return f(DataTypeTag<DataType::kUint64>{});
    case DataType::kInt8: return f(DataTypeTag<DataType::kInt8>{});
    case DataType::kInt16: return f(DataTypeTag<DataType::kInt16>{});
    case DataType::kInt32: return f(DataTypeTag<DataType::kInt32>{});
    case DataType::kInt64: return f(DataTypeTag<DataType::kInt64>{});
    case DataType::kFp16: return f(DataTypeTag<DataType::kFp16>{});
    case DataType::kBf16: return f(DataTypeTag<DataType::kBf16>{});
    case DataType::kFp32: return f(DataTypeTag<DataType::kFp32>{});
    case DataType::kFp64: return f(DataTypeTag<DataType::kFp64>{});
    case DataType::kBytes: return f(DataTypeTag<DataType::kBytes>{});
  }
  std::abort();
}

// "FP32" -> kFp32; nullopt for an unknown name. Case-sensitive, as the protocol is.
std::optional<DataType> parseDataType(std::string_view name);
std::string_view dataTypeName(DataType t);
// Bytes per element; 0 for BYTES (variable length).
size_t dataTypeSize(DataType t);
// TF Serving's tensorflow.DataType of a KServe datatype (tensorflow/core/framework/types.proto;
// BYTES is DT_STRING = 7, carried as string_val), used by the TF Serving frontend and backend
// alike; 0 (DT_INVALID) never maps. fromTfDataType: nullopt for a DT_* with no KServe datatype.
inline constexpr std::array<int, kNumDataTypes> kTfDataTypes = {10, 4, 17, 22, 23, 6, 5,
                                                                3,  9, 19, 14, 1,  2,  7};
inline int tfDataType(DataType t) { return kTfDataTypes[static_cast<size_t>(t)]; }
std::optional<DataType> fromTfDataType(int tf);

// Number of elements of a shape; nullopt when a dimension is negative or the product overflows.
std::optional<uint64_t> elementCount(const std::vector<int64_t>& shape);
// Bytes of a fixed-size tensor (elements x element size, checked); nullopt for BYTES, a negative
// dimension or an overflow. Every size computed from a client's shape goes through this.
std::optional<uint64_t> tensorByteSize(const std::vector<int64_t>& shape, DataType t);
std::string shapeToString(const std::vector<int64_t>& shape);

// The last of `tensors` whose name (nameOf(tensor)) is `name`, or null; every match is marked in
// `used` (as long as `tensors`). The backends match configured tensors to a server's metadata
// with it.
template <class T, class NameOf>
const T* findTensorByName(const std::vector<T>& tensors, std::string_view name, NameOf nameOf,
                          std::vector<bool>& used) {
  const T* found = nullptr;
  for (size_t j = 0; j < tensors.size(); ++j) {
    if (nameOf(tensors[j]) == name) {
      found = &tensors[j];
      used[j] = true;
    }
  }
  return found;
}

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

// KServe sequence parameters (Triton's sequence batcher; docs/BACKENDS.md "Sequences"):
// `sequence_id` (a non-zero integer or a non-empty string), `sequence_start`, `sequence_end`.
// A remote pool keeps the sequence on one endpoint and forwards them; the batcher never merges
// a sequence request with another request.
struct SequenceParams {
  std::string id;  // empty: not a sequence; an integer id in decimal
  bool id_is_string = false;
  bool start = false;
  bool end = false;
  // Who starts it, for the per-client bound on bindings (PoolConfig::sequence_max_per_client):
  // the request's tenant, else its source address; set by the frontend, empty: unbounded.
  std::string owner;
  bool active() const { return !id.empty(); }

  // The one rule for integer ids, in every protocol: 1..2^63-1 (0: no sequence). Backends get
  // the id as KServe's int64 sequence_id, so one from 2^63 up would be forwarded wrapped.
  static constexpr uint64_t kMaxIntegerId = 0x7fffffffffffffffULL;
  // Sets an integer id (0 clears it); false, leaving it unchanged, when `v` is out of range.
  bool setIntegerId(uint64_t v) {
    if (v > kMaxIntegerId) return false;
    id = v == 0 ? std::string() : std::to_string(v);
    id_is_string = false;
    return true;
  }
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
  SequenceParams sequence;
  net::Protocol protocol = net::Protocol::kHttpKserve;
  // One-copy reservation owning the inputs' slots (null when no input has a slot).
  std::shared_ptr<InputSlots> slots;
  // Set by connections that can tell when their client goes away (null: never cancelled).
  std::shared_ptr<net::CancelToken> cancel;
  // Tensor bytes of this request that infergate copied in userspace *before* the decoder's
  // write (HTTP/1.1 body assembly, our TCP stack's receive buffer, a gRPC message gathered
  // across DATA frames), counted by the session / decoder that did it. The batcher adds them to
  // infergate_batcher_bytes_copied_total (and _received_copy_bytes_total), so copies per
  // tensor byte = bytes_copied / request_bytes is the whole userspace count; 0 on the one-copy
  // paths (docs/BATCHING.md "One copy").
  uint64_t received_copy_bytes = 0;
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
