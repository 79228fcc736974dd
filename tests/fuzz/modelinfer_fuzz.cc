// libFuzzer target: the KServe v2 ModelInferRequest decoder (frontend/grpc_kserve_codec.h), which
// scans the protobuf wire format itself: tensors' raw_input_contents copied once into heap slots
// of exactly the announced size (or into Tensor::data), typed contents decoded element by
// element. A request that decodes and validates against its fuzz model is answered by the
// identity model and encoded (ModelInferResponse, or ModelStreamInferResponse) and the frame
// must be whole. Also: the same message through InferenceGrpcServices (ModelInfer or
// ModelStreamInfer), priorities and timeouts included.
//
// Input: [mode] then one ModelInferRequest message.
//   mode: bit 0 decoder only (else through the service), bit 1 place inputs in heap slots /
//         ModelStreamInfer, bit 2 a grpc-timeout of 1 ms, bits 3-4 x-infergate-priority
//         metadata: none, "1", "0", "x"; in decoder-only mode bits 5-7 choose how the message is
//         split for the streaming decoder (frontend/grpc_infer_stream.h), which must give the
//         same request or the same error as the whole-message decoder (issue 16).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "backends/identity_model.h"
#include "frontend/grpc_infer_stream.h"
#include "frontend/grpc_kserve_codec.h"
#include "tests/fuzz/grpc_service_driver.h"

namespace fz = infergate::fuzz;
namespace be = infergate::backends;
namespace fe = infergate::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fz::GrpcServiceDriver driver;
  static const std::vector<be::ModelConfig> models = fz::fuzzModelConfigs();
  fz::Reader in(data, size);
  const uint8_t mode = in.u8();
  const std::string_view wire = in.rest();
  if (!(mode & 1)) {
    static const std::optional<std::string> prio[] = {std::nullopt, "1", "0", "x"};
    driver.call((mode & 2) ? "/inference.GRPCInferenceService/ModelStreamInfer"
                           : "/inference.GRPCInferenceService/ModelInfer",
                wire, (mode & 4) ? 1'000'000 : 0, prio[(mode >> 3) & 3]);
    return 0;
  }
  be::InferRequest req;
  uint64_t copied = 0;
  const be::InputPlacer place = fz::heapPlacer(mode & 2);
  absl::Status st = fe::decodeModelInferRequest(wire, req, &copied, &place);
  {
    // The streaming decoder over pieces cut pseudo-randomly (from mode and the size), each
    // piece in its own buffer so that a read past a piece is caught by ASan.
    static fe::ModelInferStreamDecoder stream(256);  // a small header bound: fallbacks too
    const fe::HeaderHook hook = [&place](be::InferRequest& r) {
      place(r);
      return absl::OkStatus();
    };
    stream.begin(wire.size(), &hook);
    uint64_t x = wire.size() * 0x9E3779B97F4A7C15ull + mode;
    size_t at = 0;
    absl::Status sst;
    while (at < wire.size() && sst.ok()) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const size_t step = 1 + (x >> 33) % (mode & 0x80 ? 3 : mode & 0x40 ? 17 : 97);
      const size_t n = std::min(step, wire.size() - at);
      const std::string piece(wire.substr(at, n));
      sst = stream.piece(piece.data(), piece.size(), (x >> 20) & 1);
      at += n;
    }
    be::InferRequest sreq;
    uint64_t scopied = 0;
    if (sst.ok()) sst = stream.finish(sreq, &scopied);
    FUZZ_CHECK(sst.code() == st.code());
    FUZZ_CHECK(sst.message() == st.message());
    if (st.ok()) {
      FUZZ_CHECK(scopied == copied);
      FUZZ_CHECK(sreq.model_name == req.model_name && sreq.id == req.id);
      FUZZ_CHECK(sreq.model_version == req.model_version && sreq.priority == req.priority);
      FUZZ_CHECK(sreq.timeout_us == req.timeout_us && sreq.outputs.size() == req.outputs.size());
      FUZZ_CHECK(sreq.inputs.size() == req.inputs.size());
      for (size_t i = 0; i < req.inputs.size(); ++i) {
        const be::Tensor& a = req.inputs[i];
        const be::Tensor& b = sreq.inputs[i];
        FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape);
        FUZZ_CHECK(a.byteSize() == b.byteSize());
        FUZZ_CHECK(a.byteSize() == 0 || std::memcmp(a.bytes(), b.bytes(), a.byteSize()) == 0);
      }
      FUZZ_CHECK(sreq.received_copy_bytes <= 2 * copied);
    }
    FUZZ_CHECK(stream.bufferedBytes() == 0);
  }
  if (!st.ok()) {
    FUZZ_CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(copied <= fz::tensorBytes(req));
  FUZZ_CHECK(fz::tensorBytes(req) <= 8 * wire.size() + 64);
  const be::ModelConfig* cfg = nullptr;
  for (const auto& m : models) {
    if (m.name == req.model_name) cfg = &m;
  }
  if (cfg == nullptr || !be::validateRequest(*cfg, req).ok()) return 0;
  be::IdentityModel model(*cfg);
  be::InferResponse resp = model.compute(std::move(req));
  std::string framed;
  if (mode & 2) {
    fe::encodeModelStreamInferResponse(&resp, {}, framed);
  } else {
    fe::encodeModelInferResponse(resp, framed);
  }
  FUZZ_CHECK(framed.size() >= fe::kGrpcPrefixBytes);
  const uint32_t n = (uint32_t(uint8_t(framed[1])) << 24) | (uint32_t(uint8_t(framed[2])) << 16) |
                     (uint32_t(uint8_t(framed[3])) << 8) | uint32_t(uint8_t(framed[4]));
  FUZZ_CHECK(n == framed.size() - fe::kGrpcPrefixBytes);
  return 0;
}
