#pragma once
// KServe v2 gRPC (inference.GRPCInferenceService) tensor codec without protobuf objects for the
// tensor bytes:
// - decodeModelInferRequest scans the ModelInferRequest wire format with common/protowire.h
//   (protobuf's reading rules, without libprotobuf), keeps views of the message bytes, and copies each raw_input_contents
//   entry straight into its input Tensor's data (the one copy); typed `contents` are decoded
//   element by element into the same representation (BYTES: 4-byte LE length + bytes).
// - encodeModelInferResponse writes a ModelInferResponse with raw_output_contents directly into
//   the framed (5-byte gRPC prefix) buffer the HTTP/2 session sends from.
// Errors are INVALID_ARGUMENT naming the field and the reason (truncated varint, wrong wire
// type, contents/raw mix, unknown datatype, value out of range...). Nothing throws.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "backends/model.h"
#include "backends/tensor.h"

namespace infergate::frontend {

// Decodes `wire` (one ModelInferRequest) into `out` (protocol kGrpcKserve; every requested
// output is binary). `copied_bytes`, when given, receives the tensor bytes copied.
absl::Status decodeModelInferRequest(std::string_view wire, backends::InferRequest& out,
                                     uint64_t* copied_bytes = nullptr);

// As above, one copy for raw_input_contents: once the header fields and inputs are scanned
// (model_name/version set, each input's size in Tensor::slot_bytes), `place` (when non-null
// and non-empty) is asked to place the inputs (Model::placeInputs); each raw_input_contents
// entry is then one memcpy from `wire` into its slot (else into Tensor::data). Typed
// `contents` are measured first (Tensor::slot_bytes), placed the same way and decoded element
// by element straight into the slot.
absl::Status decodeModelInferRequest(std::string_view wire, backends::InferRequest& out,
                                     uint64_t* copied_bytes, const backends::InputPlacer* place);

// Called once a request's header is decoded (model_name/version/id, parameters, outputs, and
// every input's name, datatype, shape and byte size in Tensor::slot_bytes, no data yet) and
// before any tensor byte is written: it may place the inputs (Model::placeInputs: set
// Tensor::slot) and may refuse the request (refuse before copying: a non-OK status is what the
// decoder returns, nothing is copied). Typed `contents` are measured by a decoding pass that
// writes nothing (as the REST JSON decoder does), so they are placed too.
using HeaderHook = std::function<absl::Status(backends::InferRequest&)>;
absl::Status decodeModelInferRequest(std::string_view wire, backends::InferRequest& out,
                                     uint64_t* copied_bytes, const HeaderHook* hook);

// For the streaming decoder (grpc_infer_stream.h): `head` is every field of a ModelInferRequest
// before its first raw_input_contents. Errors: the whole-message decoder's error for those
// bytes (it meets them first). OK with `streamable` true: `out` holds the header and one input
// per `inputs` entry with Tensor::slot_bytes = the byte size its shape and datatype give (the
// size its raw_input_contents entry must have). OK with `streamable` false: only the whole
// message can be decoded the way decodeModelInferRequest does (BYTES, an unknown datatype,
// contents next to raw contents, a shape without a byte size).
absl::Status decodeModelInferHeader(std::string_view head, backends::InferRequest& out,
                                    bool& streamable);

// Appends one framed ModelInferResponse (gRPC prefix + message) to `framed`: model_name,
// model_version, id, outputs (name, datatype, shape) and raw_output_contents, for the outputs
// the request asked for (all when it named none).
void encodeModelInferResponse(const backends::InferResponse& response, std::string& framed);

// Appends one framed ModelStreamInferResponse: either error_message or infer_response.
void encodeModelStreamInferResponse(const backends::InferResponse* response,
                                    std::string_view error_message, std::string& framed);

}  // namespace infergate::frontend
