// libFuzzer target: the KServe v2 REST body codec (frontend/kserve_json.h): JSON tensors, the
// binary tensor extension (Inference-Header-Content-Length) and raw binary bodies, decoded for
// one of the fuzz models (tests/fuzz/fuzz_common.h) into Tensor::data or, one copy, into heap
// slots of exactly the announced size. A request that decodes and validates is answered by the
// identity model and encoded back; the JSON header of the answer must parse (simdjson) and the
// binary parts must add up to the body.
//
// Input: [mode][header length lo][header length hi] then the body.
//   mode: bits 0-2 model (fuzz_common.h order; 5-7: an empty config, as the REST tests use),
//         bits 3-4 header length: absent, the two bytes, 0 (raw binary body), the whole body;
//         bit 5 place inputs in heap slots; bit 6 ask every output binary.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backends/identity_model.h"
#include "frontend/kserve_json.h"
#include "simdjson.h"
#include "tests/fuzz/fuzz_common.h"

namespace fz = infergate::fuzz;
namespace be = infergate::backends;
namespace fe = infergate::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<be::ModelConfig> models = fz::fuzzModelConfigs();
  static const be::ModelConfig none;
  fz::Reader in(data, size);
  const uint8_t mode = in.u8();
  const uint16_t hlen = in.u16();
  const std::string_view body = in.rest();
  const size_t which = mode & 7;
  const be::ModelConfig& cfg = which < models.size() ? models[which] : none;
  std::optional<size_t> header_length;
  switch ((mode >> 3) & 3) {
    case 0: break;
    case 1: header_length = hlen; break;
    case 2: header_length = 0; break;
    case 3: header_length = body.size(); break;
  }
  const be::InputPlacer place = fz::heapPlacer(mode & 0x20);
  absl::StatusOr<be::InferRequest> req =
      fe::decodeInferRequest(body, header_length, cfg, cfg.name, cfg.version, &place);
  if (!req.ok()) {
    FUZZ_CHECK(req.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  // JSON numbers are at least one byte and a BYTES element costs its quotes: the decoded
  // tensors can be at most a few times the body (FP64/INT64 from one-digit numbers: 8x).
  FUZZ_CHECK(fz::tensorBytes(*req) <= 8 * body.size() + 64);
  for (const auto& t : req->inputs) {
    if (t.slot != nullptr) FUZZ_CHECK(t.data.empty());
  }
  if (which >= models.size() || !be::validateRequest(cfg, *req).ok()) return 0;
  if (mode & 0x40) req->binary_data_output = true;
  be::IdentityModel model(cfg);
  be::InferResponse resp = model.compute(std::move(*req));
  fe::EncodedInferResponse enc = fe::encodeInferResponse(resp);
  const size_t json_len = enc.json_header_length.value_or(enc.body.size());
  FUZZ_CHECK(json_len <= enc.body.size());
  static simdjson::dom::parser parser;
  simdjson::padded_string json(enc.body.data(), json_len);
  simdjson::dom::element doc;
  FUZZ_CHECK(parser.parse(json).get(doc) == simdjson::SUCCESS);
  uint64_t binary = 0;
  simdjson::dom::array outputs;
  if (doc["outputs"].get(outputs) == simdjson::SUCCESS) {
    for (simdjson::dom::element o : outputs) {
      uint64_t n = 0;
      if (o["parameters"]["binary_data_size"].get(n) == simdjson::SUCCESS) binary += n;
    }
  }
  FUZZ_CHECK(binary == enc.body.size() - json_len);
  return 0;
}
