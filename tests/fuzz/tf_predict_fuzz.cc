// libFuzzer target: TF Serving gRPC Predict (tensorflow.serving.PredictionService/Predict in
// frontend/grpc_inference_service.cc): PredictRequest parsing, tensorFromTf (typed *_val fields,
// tensor_content, broadcasting one value over the shape; the issue-13 overflow lived here),
// validation against the fuzz models (tests/fuzz/fuzz_common.h: "m", "two", "identity", "all",
// "s") and the identity model's PredictResponse. The reply must come exactly once and be framed.
//
// Input: [timeout byte] then one PredictRequest message (protobuf wire format).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/grpc_service_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static infergate::fuzz::GrpcServiceDriver driver;
  infergate::fuzz::Reader in(data, size);
  const uint8_t t = in.u8();
  const uint64_t timeout_ns = t == 0 ? 0 : (t == 255 ? UINT64_MAX : uint64_t{t} * 1'000'000);
  driver.call("/tensorflow.serving.PredictionService/Predict", in.rest(), timeout_ns,
              std::nullopt);
  return 0;
}
