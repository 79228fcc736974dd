#pragma once
// KServe v2 / Open Inference Protocol REST body codec: JSON tensors (simdjson) and Triton's
// binary tensor extension, for requests and responses; model and server metadata bodies.
//
// Pure functions over bytes; no I/O. Errors are INVALID_ARGUMENT with a message that names the
// input/output and says what is wrong (it becomes the {"error": ...} body with HTTP 400).
// Threading: callable from any thread (a thread_local simdjson parser is reused).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "backends/model.h"
#include "backends/tensor.h"

namespace infergate::frontend {

// Decodes a POST .../infer body.
//  - `inference_header_length`: value of the Inference-Header-Content-Length header, nullopt if
//    absent (then the whole body is JSON). When set, body[0, len) is the JSON header and the
//    binary parts of inputs with a "binary_data_size" parameter follow in input order; the sum
//    of those sizes must equal the remaining bytes exactly.
//  - length 0: raw binary request: the body is the single input of `model` (which must have
//    exactly one input), batch 1; all outputs are returned binary.
//  - `model` supplies the datatype/shape for raw binary requests and for nothing else; full
//    validation against the config is backends::validateRequest's job.
// JSON "data" may be flat or nested (nesting must agree with the shape); every datatype is
// accepted with range checks (integers must fit and have no fraction or exponent, BOOL is
// true/false, FP16/BF16/FP32 are rounded to nearest-even and a number beyond the type's finite
// range is rejected, BYTES are strings). Sets request.model_name/version from the arguments.
absl::StatusOr<backends::InferRequest> decodeInferRequest(
    std::string_view body, std::optional<size_t> inference_header_length,
    const backends::ModelConfig& model, std::string_view model_name,
    std::string_view model_version);

// As above, one copy: after the header pass (names, datatypes, shapes, and each input's size in
// Tensor::slot_bytes), `place` (when non-null and non-empty) is asked to place the inputs
// (Model::placeInputs). When it does, every element is written once, straight into its slot:
// binary-extension and raw parts with one memcpy from `body`, JSON "data" parsed into the
// slot's typed elements; Tensor::data stays empty. Otherwise the same writes go to
// Tensor::data. On an error after placement the returned status drops the request and with it
// the reservation.
absl::StatusOr<backends::InferRequest> decodeInferRequest(
    std::string_view body, std::optional<size_t> inference_header_length,
    const backends::ModelConfig& model, std::string_view model_name,
    std::string_view model_version, const backends::InputPlacer* place);

// ---- Streaming decode (frontend/kserve_body_stream.h): the same decoder, run on the JSON
// header alone while the binary part is still arriving. Together with finishInferHeader it gives
// exactly the request or error decodeInferRequest gives for the whole body.

// Refuse before copying: called after the header pass and before placement; a non-OK status
// (the model's admission answer) is kept in InferHeaderPass::refused and nothing is placed.
using InferAdmission = std::function<absl::Status(backends::InferRequest&)>;

struct InferHeaderPass {
  struct Binary {
    uint32_t input;  // index in InferRequest::inputs
    uint64_t size;   // binary_data_size: the bytes that follow for it, in this order
  };
  // The binary inputs whose size check ran, in input (and body) order. When the pass succeeds
  // they are placed (Tensor::slot, or Tensor::data sized) and the caller writes each one's bytes
  // into Tensor::mutableBytes() as they arrive.
  absl::InlinedVector<Binary, 4> binary;
  // The first error in decodeInferRequest's order that the header alone decides (ok: none).
  absl::Status error;
  // `error` comes after the inputs' pass (outputs, JSON data): the unclaimed-bytes check of an
  // unknown-length body goes first (finishInferHeader).
  bool error_after_inputs = false;
  bool inputs_done = false;  // internal: the inputs' pass completed
  // A binary BYTES input (its layout is checked on its bytes): nothing was placed; the caller
  // assembles the body and runs decodeInferRequest on all of it.
  bool needs_bytes = false;
  // The admission refusal (InferAdmission): nothing was placed.
  absl::Status refused;
};

// Header pass of a binary-extension request: `json` is its JSON header (the
// Inference-Header-Content-Length bytes); `binary_bytes` the length of what follows when
// `length_known` (Content-Length - header length), else (chunked) the most it may be (the body
// limit: sizes over it are never placed). On success with no refusal and no
// needs_bytes, the inputs are placed and JSON "data" inputs written; `req` holds the request.
void decodeInferHeader(std::string_view json, uint64_t binary_bytes, bool length_known,
                       const backends::ModelConfig& model, std::string_view model_name,
                       std::string_view model_version, const InferAdmission* admit,
                       const backends::InputPlacer* place, backends::InferRequest& req,
                       InferHeaderPass& pass);
// The same for a raw binary body (Inference-Header-Content-Length: 0) of `body_bytes` bytes.
void decodeRawBinaryHeader(uint64_t body_bytes, const backends::ModelConfig& model,
                           std::string_view model_name, std::string_view model_version,
                           const InferAdmission* admit, const backends::InputPlacer* place,
                           backends::InferRequest& req, InferHeaderPass& pass);
// After the body: the verdict decodeInferRequest would give, `received` being the bytes that
// followed the header (ok: `req` is the decoded request once the caller wrote them).
absl::Status finishInferHeader(const InferHeaderPass& pass, const backends::InferRequest& req,
                               uint64_t received);
// decodeInferRequest's error for a header length over the body's.
absl::Status headerLengthExceedsBody(uint64_t header_length, uint64_t body_length);

struct EncodedInferResponse {
  std::string body;
  // Set when some output is binary: the JSON header's length, to be sent as
  // Inference-Header-Content-Length, with Content-Type application/octet-stream.
  std::optional<size_t> json_header_length;
};

// Encodes the response. Outputs are written as JSON "data" unless requested binary (per
// output "binary_data" or request "binary_data_output"), in which case the JSON has
// "parameters":{"binary_data_size":N} and the bytes follow the JSON header in output order.
// Floats are printed shortest-round-trip; JSON has no NaN/Inf, so a non-finite value in a JSON
// output is written as null (request binary outputs to get exact bytes).
EncodedInferResponse encodeInferResponse(const backends::InferResponse& response);

// GET /v2/models/{name}[/versions/{v}] body.
std::string encodeModelMetadata(const backends::ModelConfig& model);
// GET /v2 body.
std::string encodeServerMetadata(std::string_view name, std::string_view version);

}  // namespace infergate::frontend
