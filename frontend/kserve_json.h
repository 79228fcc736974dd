#pragma once
// KServe v2 / Open Inference Protocol REST body codec: JSON tensors (simdjson) and Triton's
// binary tensor extension, for requests and responses; model and server metadata bodies.
//
// Pure functions over bytes; no I/O. Errors are INVALID_ARGUMENT with a message that names the
// input/output and says what is wrong (it becomes the {"error": ...} body with HTTP 400).
// Threading: callable from any thread (a thread_local simdjson parser is reused).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

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
