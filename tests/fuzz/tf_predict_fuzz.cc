// libFuzzer target: TF Serving gRPC Predict (tensorflow.serving.PredictionService/Predict in
// frontend/grpc_inference_service.cc): PredictRequest decoding (typed *_val fields,
// tensor_content, broadcasting one value over the shape; the issue-13 overflow lived here),
// validation against the fuzz models (tests/fuzz/fuzz_common.h: "m", "two", "identity", "all",
// "s") and the identity model's PredictResponse. The reply must come exactly once and be framed.
//
// Issue 16: the same bytes also go through the wire decoder (frontend/tf_predict_codec.h) and
// the libprotobuf decode it replaces (tests/unit/frontend/tf_predict_reference.h) for every fuzz
// model: both must accept or refuse alike, with the same error, the same model spec, outputs and
// tensors; and the decode placed into exact heap slots (ASan-guarded) must write the same bytes.
//
// The streaming decoder (frontend/tf_predict_stream.h) gets the same message in pseudo-random
// pieces (cut points from a hash of the input) for every fuzz model: streamed or decoded whole,
// it must give the whole decoder's answer, errors included, and a streamed request its bytes
// from the slots, with nothing counted as copied before.
//
// Input: [timeout byte] then one PredictRequest message (protobuf wire format).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "frontend/tf_predict_codec.h"
#include "frontend/tf_predict_stream.h"
#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/grpc_service_driver.h"
#include "tests/unit/frontend/tf_predict_reference.h"

namespace fz = infergate::fuzz;
namespace be = infergate::backends;
namespace fe = infergate::frontend;

namespace {

bool sameBytes(const be::Tensor& a, const be::Tensor& b) {
  return a.byteSize() == b.byteSize() &&
         (a.byteSize() == 0 || std::memcmp(a.bytes(), b.bytes(), a.byteSize()) == 0);
}

void differential(std::string_view wire, const be::ModelConfig& cfg) {
  be::InferRequest want;
  fe::PredictModelSpec want_spec;
  std::vector<std::string> unknown;
  const absl::Status ref = fe::reference::decode(wire, cfg, want, &want_spec, &unknown);

  fe::PredictRequestScan scan;
  absl::Status got = fe::scanPredictRequest(wire, scan);
  be::InferRequest req;
  if (got.ok()) got = fe::decodePredictInputs(scan, cfg, req);
  FUZZ_CHECK(got.code() == ref.code());
  if (!ref.ok()) {
    if (ref.message().find("is not an input of model") != std::string_view::npos) {
      bool named = false;  // the former decode named the first unknown key in hash order
      for (const std::string& a : unknown) {
        named = named || got.message() == "input '" + a + "' is not an input of model '" +
                                               want_spec.name + "'";
      }
      FUZZ_CHECK(named);
    } else {
      FUZZ_CHECK(got.message() == ref.message());
    }
    return;
  }
  FUZZ_CHECK(scan.spec.name == want_spec.name && scan.spec.version == want_spec.version &&
             scan.spec.has_version == want_spec.has_version &&
             scan.spec.version_label == want_spec.version_label &&
             scan.spec.signature_name == want_spec.signature_name);
  FUZZ_CHECK(req.model_name == want.model_name && req.model_version == want.model_version);
  FUZZ_CHECK(req.received_copy_bytes == 0);
  FUZZ_CHECK(req.outputs.size() == want.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    FUZZ_CHECK(req.outputs[i].name == want.outputs[i].name && req.outputs[i].binary);
  }
  FUZZ_CHECK(req.inputs.size() == want.inputs.size());
  for (size_t i = 0; i < want.inputs.size(); ++i) {
    const be::Tensor& a = want.inputs[i];
    const be::Tensor& b = req.inputs[i];
    FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && sameBytes(a, b));
  }
  // Placed into exact heap slots: the same bytes, and the same validation verdict.
  static const be::InputPlacer place = fz::heapPlacer(true);
  be::InferRequest placed;
  uint64_t copied = 0;
  FUZZ_CHECK(fe::decodePredictInputs(scan, cfg, placed, &place, &copied).ok());
  FUZZ_CHECK(copied == fz::tensorBytes(want));
  for (size_t i = 0; i < want.inputs.size(); ++i) {
    FUZZ_CHECK(placed.inputs[i].data.empty() && sameBytes(placed.inputs[i], want.inputs[i]));
  }
  FUZZ_CHECK(be::validateRequest(cfg, placed).ok() == be::validateRequest(cfg, want).ok());
}

// The message through the streaming decoder in pieces: the whole decoder's answer.
void streamedDifferential(std::string_view wire, const be::ModelConfig& cfg, uint64_t seed) {
  fe::PredictRequestScan scan;
  absl::Status want = fe::scanPredictRequest(wire, scan);
  be::InferRequest whole;
  if (want.ok()) want = fe::decodePredictInputs(scan, cfg, whole);

  static const be::InputPlacer place = fz::heapPlacer(true);
  const fe::PredictStreamHook hook = [&](fe::PredictRequestScan& s,
                                         be::InferRequest& req) -> absl::StatusOr<bool> {
    FUZZ_CHECK(s.inputs.size() == 1 && s.inputs[0].streamed_content > 0);
    return fe::decodePredictInputs(s, cfg, req, &place).ok();
  };
  static fe::PredictStreamDecoder d(256);  // a small header bound: the gather path too
  d.begin(wire.size(), &hook);
  size_t at = 0;
  while (at < wire.size()) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const size_t n =
        std::min<size_t>(wire.size() - at, 1 + (seed >> 33) % (1u << ((seed >> 8) % 10)));
    FUZZ_CHECK(d.piece(wire.data() + at, n, (seed & 1) != 0).ok());  // no refusal here
    at += n;
    FUZZ_CHECK(d.bufferedBytes() <=
               2 * wire.size() + 2 * fe::PredictStreamDecoder::kMaxHeadBytes);
  }
  fe::PredictStreamDecoder::Result r = d.finish();
  FUZZ_CHECK(r.status.ok());
  absl::Status got;
  be::InferRequest req;
  if (r.streamed) {
    req = std::move(r.request);
    FUZZ_CHECK(want.ok());
    FUZZ_CHECK(req.inputs.size() == 1 && req.inputs[0].data.empty());
    FUZZ_CHECK(r.copied_bytes == req.inputs[0].byteSize());
  } else {
    FUZZ_CHECK(r.whole == wire);
    fe::PredictRequestScan s2;
    got = fe::scanPredictRequest(r.whole, s2);
    if (got.ok()) got = fe::decodePredictInputs(s2, cfg, req);
  }
  FUZZ_CHECK(got.code() == want.code() && got.message() == want.message());
  d.reset();
  if (!want.ok()) return;
  FUZZ_CHECK(req.model_name == whole.model_name && req.model_version == whole.model_version);
  FUZZ_CHECK(req.outputs.size() == whole.outputs.size());
  FUZZ_CHECK(req.inputs.size() == whole.inputs.size());
  for (size_t i = 0; i < whole.inputs.size(); ++i) {
    const be::Tensor& a = whole.inputs[i];
    const be::Tensor& b = req.inputs[i];
    FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && sameBytes(a, b));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static infergate::fuzz::GrpcServiceDriver driver;
  static const std::vector<be::ModelConfig> models = fz::fuzzModelConfigs();
  static const bool quiet = [] {  // libprotobuf logs each refused invalid UTF-8 string
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)quiet;
  infergate::fuzz::Reader in(data, size);
  const uint8_t t = in.u8();
  const uint64_t timeout_ns = t == 0 ? 0 : (t == 255 ? UINT64_MAX : uint64_t{t} * 1'000'000);
  const std::string_view message = in.rest();
  driver.call("/tensorflow.serving.PredictionService/Predict", message, timeout_ns,
              std::nullopt);
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the input: the cut points
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  for (const be::ModelConfig& cfg : models) {
    differential(message, cfg);
    streamedDifferential(message, cfg, seed);
  }
  return 0;
}
