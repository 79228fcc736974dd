// The TF Serving parts of the hand-written wire code (backends/grpc_client_wire.h) against bytes
// the Python protobuf runtime serialized (SerializeToString(deterministic=True)) from
// frontend/proto/tf_*.proto and tests/servers/tf_metadata.proto, and the signature comparison
// of the tfserving backend (backends/tfserving_backend.h).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backends/grpc_client_wire.h"
#include "backends/tfserving_backend.h"
#include "tests/unit/backends/test_util.h"

namespace infergate::backends {
namespace {

using test_util::hex;
using test_util::unhex;

// A BYTES tensor buffer: per element a 4-byte little-endian length, then the bytes.
std::string bytesTensor(const std::vector<std::string>& elems) {
  std::string out;
  for (const std::string& e : elems) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out += e;
  }
  return out;
}

// python3: GetModelMetadataRequest(model_spec=ModelSpec(name='m', version=Int64Value(3)),
// metadata_field=['signature_def']).
constexpr char kMetadataRequest[] = "0a070a016d12020803120d7369676e61747572655f646566";

// python3: GetModelMetadataResponse(model_spec{name 'm', version 1}, metadata{'signature_def':
// Any.Pack(SignatureDefMap{
//   'serving_default': {method_name 'tensorflow/serving/predict',
//       inputs {x: {name 'x:0', DT_FLOAT, [-1, 4]}, s: {name 's:0', DT_STRING, unknown_rank}},
//       outputs {y: {name 'y:0', DT_HALF, [-1, 1 (dim name 'one')]}}},
//   'other': {inputs {z: {name 'z:0', DT_INT32, no shape}}}})}).
constexpr char kMetadataResponse[] =
    "0a070a016d1202080112f1010a0d7369676e61747572655f64656612df010a36747970652e676f6f676c6561"
    "7069732e636f6d2f74656e736f72666c6f772e73657276696e672e5369676e61747572654465664d617012a4"
    "010a170a056f74686572120e0a0c0a017a12070a037a3a3010030a88010a0f73657276696e675f6465666175"
    "6c7412750a1f0a0178121a0a03783a3010011a11120b08ffffffffffffffffff01120208040a100a0173120b"
    "0a03733a3010071a02180112240a0179121f0a03793a3010131a16120b08ffffffffffffffffff0112070801"
    "12036f6e651a1a74656e736f72666c6f772f73657276696e672f70726564696374";

TEST(TfServingWire, GetModelMetadataRequestMatchesProtobuf) {
  wire::TfModelSpec spec{"m", 3, "serving_default"};
  EXPECT_EQ(hex(wire::encodeGetModelMetadata(spec)), kMetadataRequest);
}

TEST(TfServingWire, DecodesSignatureDefMapFromProtobufBytes) {
  auto sigs = wire::decodeGetModelMetadata(unhex(kMetadataResponse));
  ASSERT_TRUE(sigs.ok()) << sigs.status();
  ASSERT_EQ(sigs->size(), 2u);
  const wire::TfSignatureDef& other = (*sigs)[0];
  EXPECT_EQ(other.key, "other");
  ASSERT_EQ(other.inputs.size(), 1u);
  EXPECT_EQ(other.inputs[0].alias, "z");
  EXPECT_EQ(other.inputs[0].dtype, 3);
  EXPECT_TRUE(other.inputs[0].unknown_rank);  // no tensor_shape at all
  const wire::TfSignatureDef& sd = (*sigs)[1];
  EXPECT_EQ(sd.key, "serving_default");
  EXPECT_EQ(sd.method_name, "tensorflow/serving/predict");
  ASSERT_EQ(sd.inputs.size(), 2u);
  EXPECT_EQ(sd.inputs[0].alias, "x");
  EXPECT_EQ(sd.inputs[0].tensor_name, "x:0");
  EXPECT_EQ(sd.inputs[0].dtype, 1);
  EXPECT_EQ(sd.inputs[0].shape, (std::vector<int64_t>{-1, 4}));
  EXPECT_FALSE(sd.inputs[0].unknown_rank);
  EXPECT_EQ(sd.inputs[1].alias, "s");
  EXPECT_EQ(sd.inputs[1].dtype, 7);
  EXPECT_TRUE(sd.inputs[1].unknown_rank);
  EXPECT_TRUE(sd.inputs[1].shape.empty());
  ASSERT_EQ(sd.outputs.size(), 1u);
  EXPECT_EQ(sd.outputs[0].alias, "y");
  EXPECT_EQ(sd.outputs[0].dtype, 19);
  EXPECT_EQ(sd.outputs[0].shape, (std::vector<int64_t>{-1, 1}));
}

TEST(TfServingWire, MetadataErrorsAreStatusesNotCrashes) {
  const std::string full = unhex(kMetadataResponse);
  // Every truncation is either an error or a (shorter) decode; never a crash.
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = wire::decodeGetModelMetadata(std::string_view(full.data(), n));
    if (n == 0) {
      EXPECT_FALSE(r.ok());  // no signature_def entry
    }
  }
  EXPECT_FALSE(wire::decodeGetModelMetadata(std::string_view(full.data(), full.size() - 1)).ok());
  // No signature_def entry: an error saying so.
  std::string none;
  wire::putString(none, 1, std::string("\x0a\x01m", 3));
  auto r = wire::decodeGetModelMetadata(none);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("signature_def"), std::string::npos);
  // An Any of another type.
  std::string any, entry, msg;
  wire::putString(any, 1, "type.googleapis.com/tensorflow.serving.Other");
  wire::putString(entry, 1, "signature_def");
  wire::putString(entry, 2, any);
  wire::putString(msg, 2, entry);
  r = wire::decodeGetModelMetadata(msg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("tensorflow.serving.Other"), std::string::npos);
}

// python3: PredictRequest(model_spec{name 'm', signature_name 'serving_default'},
// inputs {s: TensorProto(DT_STRING, [2], string_val [b'ab', b'']),
//         x: TensorProto(DT_FLOAT, [1, 2], tensor_content pack('<2f', 1.5, -2.0))},
// output_filter ['o']).
constexpr char kPredictBytesRequest[] =
    "0a140a016d1a0f73657276696e675f64656661756c7412130a0173120e080712041202080242026162420012"
    "1b0a0178121608011208120208011202080222080000c03f000000c01a016f";

TEST(TfServingWire, PredictEncodesBytesAsStringValMatchingProtobuf) {
  const std::string s = bytesTensor({"ab", ""});
  float x[2] = {1.5f, -2.0f};
  std::vector<int64_t> s_shape = {2}, x_shape = {1, 2};
  std::vector<wire::InferInput> in = {
      {"s", DataType::kBytes, &s_shape, reinterpret_cast<const uint8_t*>(s.data()), s.size(), {},
       0},
      {"x", DataType::kFp32, &x_shape, reinterpret_cast<const uint8_t*>(x), sizeof(x), {}, 0}};
  wire::TfModelSpec spec{"m", -1, "serving_default"};
  wire::ModelInferEncoding enc;
  wire::encodePredict(spec, in, {"o"}, enc);
  EXPECT_EQ(hex(enc.flatten()), kPredictBytesRequest);
  EXPECT_EQ(enc.totalBytes(), enc.flatten().size());
  // The FP32 tensor stays referenced; the strings were copied (no piece points into `s`).
  int external = 0;
  for (const auto& p : enc.pieces) {
    if (!p.external) continue;
    ++external;
    EXPECT_EQ(p.data, reinterpret_cast<const uint8_t*>(x));
  }
  EXPECT_EQ(external, 1);
  EXPECT_EQ(enc.raw_bytes, 8u + 2u);
}

TEST(TfServingWire, SplitBytesTensor) {
  const std::string s = bytesTensor({"abc", "", "d"});
  auto e = wire::splitBytesTensor(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e, (std::vector<std::string_view>{"abc", "", "d"}));
  // Truncated length, truncated element, trailing byte: refused.
  for (size_t n : {s.size() - 1, size_t{2}, size_t{5}}) {
    EXPECT_FALSE(wire::splitBytesTensor(reinterpret_cast<const uint8_t*>(s.data()), n))
        << n;
  }
  const std::string big = bytesTensor({"x"}) + std::string("\xff\xff\xff\xff", 4);
  EXPECT_FALSE(wire::splitBytesTensor(reinterpret_cast<const uint8_t*>(big.data()), big.size()));
  auto empty = wire::splitBytesTensor(nullptr, 0);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
}

// python3: PredictResponse(model_spec{name 'm'},
// outputs {o: TensorProto(DT_STRING, [1, 2], string_val [b'hello', b'']),
//          y: TensorProto(DT_FLOAT, [1], tensor_content pack('<f', 3.25))}).
constexpr char kPredictStringResponse[] =
    "0a1a0a016f1215080712081202080112020802420568656c6c6f42000a130a0179120e0801120412020801220400"
    "00504012030a016d";

TEST(TfServingWire, DecodesStringValIntoBytesLayout) {
  const std::string msg = unhex(kPredictStringResponse);
  std::string storage;
  auto outs = wire::decodePredictResponse(msg, storage);
  ASSERT_TRUE(outs.ok()) << outs.status();
  ASSERT_EQ(outs->size(), 2u);
  const wire::InferResponseOutput& o = (*outs)[0];
  EXPECT_EQ(o.name, "o");
  EXPECT_EQ(o.datatype, "BYTES");
  EXPECT_EQ(o.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(o.raw), o.raw_bytes),
            bytesTensor({"hello", ""}));
  EXPECT_EQ(o.raw, reinterpret_cast<const uint8_t*>(storage.data()));  // owned by the caller
  const wire::InferResponseOutput& y = (*outs)[1];
  EXPECT_EQ(y.name, "y");
  EXPECT_EQ(y.datatype, "FP32");
  ASSERT_EQ(y.raw_bytes, 4u);
  float v = 0;
  std::memcpy(&v, y.raw, 4);
  EXPECT_EQ(v, 3.25f);
  EXPECT_GE(y.raw, reinterpret_cast<const uint8_t*>(msg.data()));  // a view of the message
  EXPECT_LT(y.raw, reinterpret_cast<const uint8_t*>(msg.data() + msg.size()));
  // Without storage, a string output is refused rather than lost.
  EXPECT_EQ(wire::decodePredictResponse(msg).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(TfServingWire, StringOutputCountMustMatchShape) {
  // DT_STRING [3] with two string_val: an error naming the count.
  std::string tp, shape, dim, entry, msg;
  wire::putVarintField(dim, 1, 3);
  wire::putString(shape, 2, dim);
  wire::putVarintField(tp, 1, 7);
  wire::putString(tp, 2, shape);
  wire::putString(tp, 8, "a");
  wire::putString(tp, 8, "b");
  wire::putString(entry, 1, "o");
  wire::putString(entry, 2, tp);
  wire::putString(msg, 1, entry);
  std::string storage;
  auto r = wire::decodePredictResponse(msg, storage);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("2 string_val"), std::string::npos);
}

TEST(TfServingWire, BytesRoundTripThroughEncoderAndDecoder) {
  // Our request's TensorProto, re-wrapped as a PredictResponse entry, decodes back to the input
  // buffer byte for byte (what the identity test server does).
  const std::string s = bytesTensor({"", "\x00\x01\xff", std::string(300, 'z')});
  std::vector<int64_t> shape = {1, 3};
  std::vector<wire::InferInput> in = {
      {"s", DataType::kBytes, &shape, reinterpret_cast<const uint8_t*>(s.data()), s.size(), {},
       0}};
  wire::ModelInferEncoding enc;
  wire::encodePredict(wire::TfModelSpec{"m", -1, ""}, in, {}, enc);
  const std::string req = enc.flatten();
  wire::Reader r(req);
  std::string resp;
  while (r.next()) {
    if (r.field() == 2) wire::putString(resp, 1, r.bytes());
  }
  ASSERT_FALSE(r.error());
  std::string storage;
  auto outs = wire::decodePredictResponse(resp, storage);
  ASSERT_TRUE(outs.ok()) << outs.status();
  ASSERT_EQ(outs->size(), 1u);
  EXPECT_EQ((*outs)[0].datatype, "BYTES");
  EXPECT_EQ((*outs)[0].shape, shape);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*outs)[0].raw), (*outs)[0].raw_bytes), s);
}

TEST(TfServingWire, DataTypeNames) {
  EXPECT_EQ(tfDataType(DataType::kBytes), 7);
  EXPECT_EQ(fromTfDataType(7), DataType::kBytes);
  // Every KServe datatype has its DT_*, and the mapping goes both ways.
  for (int k = 0; k < kNumDataTypes; ++k) {
    const DataType t = static_cast<DataType>(k);
    EXPECT_NE(tfDataType(t), 0) << dataTypeName(t);
    EXPECT_EQ(fromTfDataType(tfDataType(t)), t) << dataTypeName(t);
  }
  EXPECT_EQ(tfDataType(DataType::kFp16), 19);   // DT_HALF
  EXPECT_EQ(tfDataType(DataType::kBf16), 14);   // DT_BFLOAT16
  EXPECT_EQ(tfDataType(DataType::kUint64), 23);
  EXPECT_EQ(fromTfDataType(0), std::nullopt);   // DT_INVALID
  EXPECT_EQ(fromTfDataType(8), std::nullopt);   // DT_COMPLEX64: no KServe datatype
  EXPECT_EQ(wire::tfDataTypeName(1), "DT_FLOAT");
  EXPECT_EQ(wire::tfDataTypeName(7), "DT_STRING");
  EXPECT_EQ(wire::tfDataTypeName(19), "DT_HALF");
  EXPECT_EQ(wire::tfDataTypeName(23), "DT_UINT64");
  EXPECT_EQ(wire::tfDataTypeName(99), "DT_99");
}

// --- compareTfSignature ---

ModelConfig tfModel() {
  ModelConfig c;
  c.name = "m";
  c.max_batch_size = 8;
  c.inputs = {{"x", DataType::kFp32, {4}}, {"s", DataType::kBytes, {2}}};
  c.outputs = {{"y", DataType::kFp32, {1}}};
  return c;
}

wire::TfTensorInfo info(std::string alias, int dtype, std::vector<int64_t> shape) {
  wire::TfTensorInfo t;
  t.alias = std::move(alias);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

std::vector<wire::TfSignatureDef> matching() {
  wire::TfSignatureDef s;
  s.key = "serving_default";
  s.inputs = {info("s", 7, {-1, 2}), info("x", 1, {-1, 4})};
  s.outputs = {info("y", 1, {-1, 1}), info("extra", 1, {-1})};
  return {s};
}

TEST(TfServingSignature, MatchingSignatureIsAccepted) {
  EXPECT_TRUE(compareTfSignature(tfModel(), "serving_default", matching()).ok());
  // -1 at the backend accepts a fixed configured dimension; unknown rank accepts any shape.
  auto sigs = matching();
  sigs[0].inputs[1].shape = {-1, -1};
  sigs[0].inputs[0].shape.clear();
  sigs[0].inputs[0].unknown_rank = true;
  EXPECT_TRUE(compareTfSignature(tfModel(), "serving_default", sigs).ok());
}

TEST(TfServingSignature, DecodedProtobufSignatureComparesAsExpected) {
  // The Python-serialized metadata above: x FP32 [-1,4] and s (unknown rank) match; y is DT_HALF.
  auto sigs = wire::decodeGetModelMetadata(unhex(kMetadataResponse));
  ASSERT_TRUE(sigs.ok());
  absl::Status st = compareTfSignature(tfModel(), "serving_default", *sigs);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(st.message()),
            "outputs[0] 'y': datatype FP32 (DT_FLOAT) configured, the backend has DT_HALF");
}

TEST(TfServingSignature, MissingSignatureNamesThoseThatExist) {
  auto sigs = matching();
  sigs[0].key = "predict";
  wire::TfSignatureDef other;
  other.key = "classify";
  sigs.push_back(other);
  absl::Status st = compareTfSignature(tfModel(), "serving_default", sigs);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(st.message()),
            "signature 'serving_default' not found (the model has: 'predict', 'classify'; set "
            "tfserving.signature_name)");
  EXPECT_NE(std::string(compareTfSignature(tfModel(), "serving_default", {}).message())
                .find("the model has: none"),
            std::string::npos);
}

TEST(TfServingSignature, SaysPreciselyWhatDiffers) {
  auto sigs = matching();
  sigs[0].inputs = {info("x", 19, {-1, 8}), info("mask", 10, {-1, 4})};  // s missing, mask extra
  sigs[0].outputs = {info("z", 1, {-1, 1})};                                // y missing
  absl::Status st = compareTfSignature(tfModel(), "serving_default", sigs);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(st.message());
  for (const char* want :
       {"inputs[0] 'x': datatype FP32 (DT_FLOAT) configured, the backend has DT_HALF",
        "inputs[0] 'x': shape [-1,4] configured (with the batch dimension), the "
        "backend has [-1,8]",
        "inputs[1] 's' is configured but signature 'serving_default' has no such "
        "input (it has: x, mask)",
        "signature 'serving_default' also needs input 'mask' (DT_BOOL [-1,4]), which "
        "is not configured",
        "outputs[0] 'y' is configured but signature 'serving_default' has no such "
        "output (it has: z)"}) {
    EXPECT_NE(m.find(want), std::string::npos) << "missing: " << want << "\nin: " << m;
  }
}

TEST(TfServingSignature, ShapeRules) {
  ModelConfig c = tfModel();
  auto sigs = matching();
  // Configured variable dimension needs a backend -1.
  c.inputs[0].shape = {-1};
  sigs[0].inputs[1].shape = {-1, 4};
  absl::Status st = compareTfSignature(c, "serving_default", sigs);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("shape [-1,-1] configured"), std::string::npos);
  // Rank differs.
  c = tfModel();
  sigs = matching();
  sigs[0].inputs[1].shape = {4};
  st = compareTfSignature(c, "serving_default", sigs);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("the backend has [4]"), std::string::npos);
  // Without a batch dimension (max_batch_size 0) the configured shape is compared as is.
  c.max_batch_size = 0;
  c.inputs[0].shape = {4};
  c.inputs[1].shape = {-1, 2};
  c.outputs[0].shape = {-1, 1};
  EXPECT_TRUE(compareTfSignature(c, "serving_default", sigs).ok());
}

}  // namespace
}  // namespace infergate::backends
