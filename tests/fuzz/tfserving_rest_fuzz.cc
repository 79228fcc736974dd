// libFuzzer target: the TF Serving REST :predict codec (frontend/tfserving_rest.h): the
// non-finite token rewrite, row ("instances") and columnar ("inputs") decoding for one of the
// fuzz models (tests/fuzz/fuzz_common.h), and, for a request that validates, the identity
// model's answer encoded in the request's format. The answer must be JSON once its bare
// NaN/Infinity tokens are rewritten the way requests are. Issue 16: the decode placed into
// exact heap slots writes the same tensors, and a refused body never reaches the placer.
//
// Input: [mode] then the body. mode: bits 0-2 model (fuzz_common.h order, modulo the count).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "backends/identity_model.h"
#include "frontend/tfserving_rest.h"
#include "simdjson.h"
#include "tests/fuzz/fuzz_common.h"

namespace fz = infergate::fuzz;
namespace be = infergate::backends;
namespace fe = infergate::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<be::ModelConfig> models = fz::fuzzModelConfigs();
  fz::Reader in(data, size);
  const be::ModelConfig& cfg = models[(in.u8() & 7) % models.size()];
  const std::string_view body = in.rest();

  std::string rewritten;
  if (fe::rewriteNonFiniteTokens(body, rewritten)) FUZZ_CHECK(rewritten.size() <= 4 * body.size());

  fe::TfPredictFormat format = fe::TfPredictFormat::kRow;
  absl::StatusOr<be::InferRequest> req = fe::decodeTfPredictRequest(body, cfg, &format);
  if (!req.ok()) {
    FUZZ_CHECK(req.status().code() == absl::StatusCode::kInvalidArgument);
    // Refused before placement: a placer is never asked.
    static bool asked = false;
    static const be::InputPlacer spy = [](be::InferRequest&) { return asked = true; };
    fe::TfPredictFormat f2;
    FUZZ_CHECK(!fe::decodeTfPredictRequest(body, cfg, &f2, &spy).ok() && !asked);
    return 0;
  }
  FUZZ_CHECK(fz::tensorBytes(*req) <= 8 * body.size() + 64);
  {
    // Issue 16: placed into exact heap slots (ASan-guarded), the measure-then-write passes give
    // the same tensors as the decode into Tensor::data.
    static const be::InputPlacer place = fz::heapPlacer(true);
    fe::TfPredictFormat placed_format = fe::TfPredictFormat::kRow;
    absl::StatusOr<be::InferRequest> placed =
        fe::decodeTfPredictRequest(body, cfg, &placed_format, &place);
    FUZZ_CHECK(placed.ok() && placed_format == format);
    FUZZ_CHECK(placed->inputs.size() == req->inputs.size());
    for (size_t i = 0; i < req->inputs.size(); ++i) {
      const be::Tensor& a = req->inputs[i];
      const be::Tensor& b = placed->inputs[i];
      FUZZ_CHECK(b.data.empty() && a.name == b.name && a.shape == b.shape &&
                 a.byteSize() == b.byteSize() &&
                 (a.byteSize() == 0 || std::memcmp(a.bytes(), b.bytes(), a.byteSize()) == 0));
    }
  }
  if (!be::validateRequest(cfg, *req).ok()) return 0;
  be::IdentityModel model(cfg);
  be::InferResponse resp = model.compute(std::move(*req));
  absl::StatusOr<std::string> out = fe::encodeTfPredictResponse(resp, format);
  if (!out.ok()) return 0;  // e.g. a row-format answer whose outputs disagree on the batch
  std::string json;
  if (!fe::rewriteNonFiniteTokens(*out, json)) json = *out;
  static simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element doc;
  FUZZ_CHECK(parser.parse(padded).get(doc) == simdjson::SUCCESS);
  return 0;
}
