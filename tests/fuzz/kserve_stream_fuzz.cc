// libFuzzer target: the streaming KServe body decoder (frontend/kserve_body_stream.h) against the
// whole-body decoder (frontend/kserve_json.h decodeInferRequest). The body is fed in random
// pieces, with its length known (Content-Length) or not (chunked), copied by the transport or
// not; the streamed result must be the whole-body one: the same error, or the same request
// (names, datatypes, shapes, bytes, outputs, parameters), written into its slots when placed, with
// received_copy_bytes the binary bytes delivered as copied (all of them when assembled). Or the
// stream refused it at its header (be::validateRequestHeader, before placement): then it is
// INVALID_ARGUMENT, validateRequestHeader's own error when the whole body decodes.
//
// Input (the format of fuzz_kserve_json, so its corpus seeds this one):
// [mode][header length lo][header length hi] then the body.
//   mode: bits 0-2 model (fuzz_common.h order; 5-7: an empty config), bits 3-4 header length:
//         absent (treated as the two bytes), the two bytes, 0 (raw binary body), the whole body;
//         bit 5 place inputs in heap slots; bit 6 length unknown (chunked); bit 7 copied.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "frontend/kserve_body_stream.h"
#include "frontend/kserve_json.h"
#include "tests/fuzz/fuzz_common.h"

namespace fz = infergate::fuzz;
namespace be = infergate::backends;
namespace fe = infergate::frontend;

namespace {

class FuzzModel : public be::Model {
 public:
  FuzzModel(const be::ModelConfig& cfg, bool place) : cfg_(cfg), place_(fz::heapPlacer(place)) {}
  const be::ModelConfig& config() const override { return cfg_; }
  bool ready() const override { return true; }
  void infer(be::InferRequest, be::InferCallback) override {}
  bool placeInputs(be::InferRequest& r) override { return place_(r); }

 private:
  const be::ModelConfig& cfg_;
  be::InputPlacer place_;
};

std::string describe(const absl::StatusOr<be::InferRequest>& r) {
  if (!r.ok()) return "error " + r.status().ToString();
  std::string s = r->model_name + "/" + r->model_version + " id=" + r->id +
                  " p=" + std::to_string(r->priority) + " t=" + std::to_string(r->timeout_us) +
                  " b=" + std::to_string(r->binary_data_output);
  for (const auto& o : r->outputs) s += " o:" + o.name + (o.binary ? "(b)" : "");
  for (const auto& t : r->inputs) {
    s += " [" + t.name + " " + std::string(be::dataTypeName(t.dtype)) + " " +
         be::shapeToString(t.shape) + " " +
         std::string(reinterpret_cast<const char*>(t.bytes()), t.byteSize()) + "]";
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<be::ModelConfig> models = fz::fuzzModelConfigs();
  static const be::ModelConfig none;
  fz::Reader in(data, size);
  const uint8_t mode = in.u8();
  const uint16_t hlen = in.u16();
  const std::string_view body = in.rest();
  const size_t which = mode & 7;
  const be::ModelConfig& cfg = which < models.size() ? models[which] : none;
  size_t header_length = hlen;
  switch ((mode >> 3) & 3) {
    case 2: header_length = 0; break;
    case 3: header_length = body.size(); break;
    default: break;
  }
  const bool place = mode & 0x20;
  const bool known = !(mode & 0x40);
  const bool copied = mode & 0x80;
  FuzzModel model(cfg, place);
  const be::InputPlacer placer = [&](be::InferRequest& r) { return model.placeInputs(r); };
  const absl::StatusOr<be::InferRequest> whole =
      fe::decodeInferRequest(body, header_length, cfg, cfg.name, cfg.version, &placer);

  std::unique_ptr<fe::KServeBodyStream> s;
  const uint64_t max_body = body.size() + 64;  // the parser's limit: at least this body
  if (header_length > 0) {
    s = fe::KServeBodyStream::binary(model, header_length,
                                     known ? std::optional<uint64_t>(body.size()) : std::nullopt,
                                     max_body, {});
  } else if (known) {
    s = fe::KServeBodyStream::raw(model, body.size(), {});
    if (s == nullptr) return 0;  // assembled (BYTES): the whole-body decoder is the path
  } else {
    return 0;  // chunked raw: assembled
  }
  // Random pieces (1..64 bytes), from a generator seeded by the input.
  uint32_t x = 0x9e3779b9u ^ (static_cast<uint32_t>(hlen) << 8) ^ mode ^ static_cast<uint32_t>(size);
  for (size_t off = 0; off < body.size();) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    const size_t n = std::min<size_t>(1 + x % 64, body.size() - off);
    s->onBody(body.data() + off, n, copied);
    off += n;
  }
  bool refused = false;
  absl::StatusOr<be::InferRequest> got = s->finish(&refused);
  if (refused) {
    // Refused at its header (be::validateRequestHeader, before anything is placed): an invalid
    // request whichever path decodes it; the same error when the whole body decodes.
    FUZZ_CHECK(!got.ok() && got.status().code() == absl::StatusCode::kInvalidArgument);
    if (whole.ok()) {
      const absl::Status header_check = be::validateRequestHeader(cfg, *whole);
      FUZZ_CHECK(!header_check.ok() && got.status() == header_check);
    }
    return 0;
  }
  FUZZ_CHECK(describe(got) == describe(whole));
  if (got.ok()) {
    const uint64_t binary = header_length > 0 ? body.size() - header_length : body.size();
    if (s->streamingBinary()) {
      FUZZ_CHECK(got->received_copy_bytes == (copied ? binary : 0));
    } else {
      FUZZ_CHECK(got->received_copy_bytes == binary);
    }
    for (const auto& t : got->inputs) FUZZ_CHECK(place ? t.slot != nullptr : t.slot == nullptr);
  }
  return 0;
}
