// The hand-written KServe v2 / TF Serving wire encoding (backends/grpc_client_wire.h) against
// bytes produced by the Python protobuf runtime from frontend/proto/grpc_service.proto, and
// round trips through the decoder; metadata comparison messages (backends/triton_backend.h).
#include <gtest/gtest.h>

#include <string>

#include "backends/grpc_client_wire.h"
#include "backends/triton_backend.h"
#include "tests/unit/backends/test_util.h"

namespace infergate::backends {
namespace {

using test_util::hex;

TEST(TritonWire, ModelInferMatchesProtobufAndReferencesTensorBytes) {
  uint8_t data[16];
  for (int i = 0; i < 16; ++i) data[i] = static_cast<uint8_t>(i);
  std::vector<int64_t> shape = {2, 2};
  std::vector<wire::InferInput> in = {{"IN", DataType::kFp32, &shape, data, 16, {}, 0}};
  std::vector<wire::InferOutput> out = {{"OUT", {}, 0, 0}};
  wire::InferParams p;
  p.model_name = "m";
  p.id = "infergate-7";
  p.priority = 2;
  wire::ModelInferEncoding enc;
  wire::encodeModelInfer(p, in, out, enc);
  // python3: ModelInferRequest(model_name='m', id='infergate-7', parameters{priority: 2},
  // inputs[IN FP32 [2,2]], outputs[OUT], raw_input_contents=[bytes(range(16))]).
  EXPECT_EQ(hex(enc.flatten()),
            "0a016d1a0b696e666572676174652d37220e0a087072696f72697479120210022a0e0a02494e120446"
            "5033321a02020232050a034f55543a10000102030405060708090a0b0c0d0e0f");
  EXPECT_EQ(enc.raw_bytes, 16u);
  EXPECT_EQ(enc.totalBytes(), enc.flatten().size());
  // The tensor is a piece pointing at the caller's memory, not a copy.
  bool referenced = false;
  for (const auto& piece : enc.pieces) referenced |= piece.external && piece.data == data;
  EXPECT_TRUE(referenced);
}

TEST(TritonWire, SharedMemoryInputsCarryNoBytes) {
  static uint8_t data[4096] = {};
  std::vector<int64_t> shape = {4, 256};
  std::vector<wire::InferInput> in = {{"IN", DataType::kFp32, &shape, data, 4096, "region", 128}};
  std::vector<wire::InferOutput> out = {{"OUT", "region", 192, 64}};
  wire::InferParams p;
  p.model_name = "m";
  wire::ModelInferEncoding enc;
  wire::encodeModelInfer(p, in, out, enc);
  EXPECT_EQ(enc.raw_bytes, 0u);
  for (const auto& piece : enc.pieces) EXPECT_FALSE(piece.external);
  const std::string s = enc.flatten();
  EXPECT_NE(s.find("shared_memory_region"), std::string::npos);
  EXPECT_NE(s.find("shared_memory_offset"), std::string::npos);
  EXPECT_LT(s.size(), 300u);  // the 4096 tensor bytes are not in it
}

TEST(TritonWire, DecodesInferResponseAsViews) {
  // ModelInferResponse{outputs[{name OUT, datatype FP32, shape [1,2]}], raw_output_contents[8B]}
  std::string out, t;
  wire::putString(t, 1, "OUT");
  wire::putString(t, 2, "FP32");
  wire::putPackedInt64(t, 3, {1, 2});
  wire::putString(out, 5, t);
  wire::putString(out, 6, std::string("abcdefgh"));
  auto r = wire::decodeModelInferResponse(out);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "OUT");
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ((*r)[0].raw_bytes, 8u);
  EXPECT_EQ((*r)[0].raw, reinterpret_cast<const uint8_t*>(out.data() + out.size() - 8));
  // Truncated message: an error, not a crash.
  auto bad = wire::decodeModelInferResponse(std::string_view(out.data(), out.size() - 3));
  EXPECT_FALSE(bad.ok());
  // More raw contents than outputs: an error.
  wire::putString(out, 6, std::string("x"));
  EXPECT_FALSE(wire::decodeModelInferResponse(out).ok());
}

TEST(TritonWire, PredictRoundTrip) {
  float v[4] = {1, 2, 3, 4};
  std::vector<int64_t> shape = {1, 4};
  std::vector<wire::InferInput> in = {
      {"x", DataType::kFp32, &shape, reinterpret_cast<uint8_t*>(v), 16, {}, 0}};
  wire::TfModelSpec spec{"m", 3, "serving_default"};
  wire::ModelInferEncoding enc;
  wire::encodePredict(spec, in, {"y"}, enc);
  EXPECT_EQ(enc.raw_bytes, 16u);
  // Decode our own request as a PredictResponse-like map (field 2 = inputs) by renumbering is
  // not possible; check the structure with the Reader instead.
  const std::string s = enc.flatten();
  wire::Reader r(s);
  int spec_seen = 0, inputs_seen = 0, filters = 0;
  while (r.next()) {
    if (r.field() == 1) ++spec_seen;
    if (r.field() == 2) {
      ++inputs_seen;
      wire::Reader e(r.bytes());
      std::string key;
      std::string_view value;
      while (e.next()) {
        if (e.field() == 1) key = std::string(e.bytes());
        if (e.field() == 2) value = e.bytes();
      }
      EXPECT_EQ(key, "x");
      // value is a TensorProto; decodePredictResponse reads the same layout under field 1.
      std::string resp;
      std::string entry;
      wire::putString(entry, 1, "y");
      wire::putString(entry, 2, value);
      wire::putString(resp, 1, entry);
      auto outs = wire::decodePredictResponse(resp);
      ASSERT_TRUE(outs.ok()) << outs.status();
      ASSERT_EQ(outs->size(), 1u);
      EXPECT_EQ((*outs)[0].datatype, "FP32");
      EXPECT_EQ((*outs)[0].shape, shape);
      ASSERT_EQ((*outs)[0].raw_bytes, 16u);
      EXPECT_EQ(std::memcmp((*outs)[0].raw, v, 16), 0);
    }
    if (r.field() == 3) ++filters;
  }
  EXPECT_FALSE(r.error());
  EXPECT_EQ(spec_seen, 1);
  EXPECT_EQ(inputs_seen, 1);
  EXPECT_EQ(filters, 1);
}

TEST(TritonMetadata, SaysPreciselyWhatDiffers) {
  ModelConfig c;
  c.name = "m";
  c.max_batch_size = 8;
  c.inputs = {{"INPUT0", DataType::kFp32, {16}}, {"INPUT1", DataType::kInt32, {4}}};
  c.outputs = {{"OUTPUT0", DataType::kFp32, {16}}};
  wire::ModelMetadata md;
  md.inputs = {{"INPUT0", "FP32", {-1, 16}}, {"INPUT1", "INT32", {-1, 4}}};
  md.outputs = {{"OUTPUT0", "FP32", {-1, 16}}, {"EXTRA", "FP32", {-1}}};
  EXPECT_TRUE(compareMetadata(c, md).ok());  // extra outputs are fine

  md.inputs[0].datatype = "FP16";
  md.inputs[1].shape = {-1, 5};
  md.outputs.erase(md.outputs.begin());
  md.inputs.push_back({"MASK", "BOOL", {-1, 16}});
  absl::Status s = compareMetadata(c, md);
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(s.message());
  EXPECT_NE(m.find("inputs[0] 'INPUT0': datatype FP32 configured, the backend has FP16"),
            std::string::npos) << m;
  EXPECT_NE(m.find("inputs[1] 'INPUT1': shape [-1,4] configured"), std::string::npos) << m;
  EXPECT_NE(m.find("outputs[0] 'OUTPUT0' is configured but the backend model has no such output"),
            std::string::npos) << m;
  EXPECT_NE(m.find("the backend model also needs input 'MASK'"), std::string::npos) << m;
}

}  // namespace
}  // namespace infergate::backends
