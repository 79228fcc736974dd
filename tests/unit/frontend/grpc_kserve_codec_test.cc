// ModelInferRequest wire scanner against protobuf's own encoder (our generated messages): raw
// and typed contents for every datatype, packed and unpacked, parameters, truncation at every
// byte, wrong wire types; and the response encoder read back by protobuf.
#include <gtest/gtest.h>

#include <cstring>

#include "frontend/grpc_framing.h"
#include "frontend/grpc_kserve_codec.h"
#include "grpc_service.pb.h"
#include "tests/mocks/tensor_bytes.h"

namespace infergate::frontend {
namespace {

using backends::DataType;

using mocks::le;

absl::Status decode(const inference::ModelInferRequest& m, backends::InferRequest& out) {
  return decodeModelInferRequest(m.SerializeAsString(), out);
}

TEST(KServeGrpcDecode, RawContentsCopiedOnce) {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  m.set_model_version("1");
  m.set_id("abc");
  auto* in = m.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(4);
  const auto data = le<float>({1.f, 2.f, 3.f, -4.f});
  m.add_raw_input_contents(std::string(data.begin(), data.end()));
  m.add_outputs()->set_name("OUTPUT0");
  backends::InferRequest r;
  uint64_t copied = 0;
  ASSERT_TRUE(decodeModelInferRequest(m.SerializeAsString(), r, &copied).ok());
  EXPECT_EQ(r.model_name, "identity");
  EXPECT_EQ(r.model_version, "1");
  EXPECT_EQ(r.id, "abc");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].name, "INPUT0");
  EXPECT_EQ(r.inputs[0].dtype, DataType::kFp32);
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(r.inputs[0].data, data);
  EXPECT_EQ(copied, 16u);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "OUTPUT0");
  EXPECT_EQ(r.protocol, net::Protocol::kGrpcKserve);
}

TEST(KServeGrpcDecode, RawContentsArePlacedIntoSlots) {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  for (const char* name : {"A", "B"}) {
    auto* in = m.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->add_shape(2);
  }
  const auto a = le<float>({1.f, 2.f});
  const auto b = le<float>({3.f, 4.f});
  m.add_raw_input_contents(std::string(a.begin(), a.end()));
  m.add_raw_input_contents(std::string(b.begin(), b.end()));
  std::vector<uint8_t> arena(32, 0);
  std::string seen_model;
  backends::InputPlacer place = [&](backends::InferRequest& r) {
    seen_model = r.model_name;  // the header is decoded before placement
    EXPECT_EQ(r.inputs[0].slot_bytes, 8u);
    EXPECT_EQ(r.inputs[1].slot_bytes, 8u);
    r.inputs[0].slot = arena.data();
    r.inputs[1].slot = arena.data() + 8;
    return true;
  };
  backends::InferRequest r;
  uint64_t copied = 0;
  ASSERT_TRUE(decodeModelInferRequest(m.SerializeAsString(), r, &copied, &place).ok());
  EXPECT_EQ(seen_model, "identity");
  EXPECT_EQ(copied, 16u);
  EXPECT_TRUE(r.inputs[0].data.empty());
  EXPECT_EQ(std::memcmp(arena.data(), a.data(), 8), 0);
  EXPECT_EQ(std::memcmp(arena.data() + 8, b.data(), 8), 0);
  EXPECT_EQ(r.inputs[1].byteSize(), 8u);
}

struct TypedCase {
  const char* datatype;
  std::function<void(inference::InferTensorContents&)> fill;
  std::vector<uint8_t> want;
};

TEST(KServeGrpcDecode, TypedContentsEveryDatatype) {
  const std::vector<TypedCase> cases = {
      {"BOOL", [](auto& c) { c.add_bool_contents(true); c.add_bool_contents(false); }, {1, 0}},
      {"INT8", [](auto& c) { c.add_int_contents(-128); c.add_int_contents(127); }, le<int8_t>({-128, 127})},
      {"INT16", [](auto& c) { c.add_int_contents(-300); c.add_int_contents(300); }, le<int16_t>({-300, 300})},
      {"INT32", [](auto& c) { c.add_int_contents(-70000); c.add_int_contents(5); }, le<int32_t>({-70000, 5})},
      {"INT64", [](auto& c) { c.add_int64_contents(-(1ll << 40)); c.add_int64_contents(1); }, le<int64_t>({-(1ll << 40), 1})},
      {"UINT8", [](auto& c) { c.add_uint_contents(255); c.add_uint_contents(0); }, le<uint8_t>({255, 0})},
      {"UINT16", [](auto& c) { c.add_uint_contents(65535); c.add_uint_contents(1); }, le<uint16_t>({65535, 1})},
      {"UINT32", [](auto& c) { c.add_uint_contents(4000000000u); c.add_uint_contents(2); }, le<uint32_t>({4000000000u, 2})},
      {"UINT64", [](auto& c) { c.add_uint64_contents(1ull << 63); c.add_uint64_contents(3); }, le<uint64_t>({1ull << 63, 3})},
      {"FP32", [](auto& c) { c.add_fp32_contents(1.5f); c.add_fp32_contents(-0.25f); }, le<float>({1.5f, -0.25f})},
      {"FP64", [](auto& c) { c.add_fp64_contents(1e300); c.add_fp64_contents(-2.0); }, le<double>({1e300, -2.0})},
      {"BYTES", [](auto& c) { c.add_bytes_contents("hi"); c.add_bytes_contents(""); },
       {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0}},
  };
  for (const TypedCase& tc : cases) {
    inference::ModelInferRequest m;
    auto* in = m.add_inputs();
    in->set_name("X");
    in->set_datatype(tc.datatype);
    in->add_shape(2);
    tc.fill(*in->mutable_contents());
    backends::InferRequest r;
    ASSERT_TRUE(decode(m, r).ok()) << tc.datatype;
    EXPECT_EQ(backends::dataTypeName(r.inputs[0].dtype), tc.datatype);
    EXPECT_EQ(r.inputs[0].data, tc.want) << tc.datatype;
  }
}

TEST(KServeGrpcDecode, UnpackedRepeatedAndShapeAccepted) {
  // Hand-encoded: shape as unpacked varints, fp32_contents unpacked (fixed32 per element).
  std::string input;
  input += "\x0a\x01X";                // name
  input += "\x12\x04" "FP32";          // datatype
  input += "\x18\x02";                 // shape 2 (unpacked varint)
  std::string contents;
  const float a = 1.f, b = 2.f;
  contents += "\x35";                   // field 6, fixed32
  contents.append(reinterpret_cast<const char*>(&a), 4);
  contents += "\x35";
  contents.append(reinterpret_cast<const char*>(&b), 4);
  input += "\x2a";
  input += static_cast<char>(contents.size());
  input += contents;
  std::string wire = "\x2a";
  wire += static_cast<char>(input.size());
  wire += input;
  backends::InferRequest r;
  ASSERT_TRUE(decodeModelInferRequest(wire, r).ok());
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(r.inputs[0].data, le<float>({1.f, 2.f}));
}

TEST(KServeGrpcDecode, Parameters) {
  inference::ModelInferRequest m;
  (*m.mutable_parameters())["priority"].set_int64_param(2);
  (*m.mutable_parameters())["timeout"].set_int64_param(1500);
  (*m.mutable_parameters())["other"].set_string_param("x");
  backends::InferRequest r;
  ASSERT_TRUE(decode(m, r).ok());
  EXPECT_EQ(r.priority, 2);
  EXPECT_EQ(r.timeout_us, 1500u);
  inference::ModelInferRequest m2;
  (*m2.mutable_parameters())["priority"].set_uint64_param(1);
  backends::InferRequest r2;
  ASSERT_TRUE(decode(m2, r2).ok());
  EXPECT_EQ(r2.priority, 1);
}

TEST(KServeGrpcDecode, Errors) {
  auto base = [] {
    inference::ModelInferRequest m;
    auto* in = m.add_inputs();
    in->set_name("X");
    in->set_datatype("INT8");
    in->add_shape(1);
    return m;
  };
  backends::InferRequest r;
  {
    auto m = base();
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(128);
    EXPECT_EQ(decode(m, r).code(), absl::StatusCode::kInvalidArgument);  // out of range
  }
  {
    auto m = base();
    m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
    absl::Status st = decode(m, r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("fp32_contents"), std::string::npos);
  }
  {
    auto m = base();
    m.mutable_inputs(0)->set_datatype("FP33");
    EXPECT_EQ(decode(m, r).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    auto m = base();
    m.mutable_inputs(0)->set_datatype("FP16");
    m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
    EXPECT_EQ(decode(m, r).code(), absl::StatusCode::kInvalidArgument);  // raw only
  }
  {
    auto m = base();
    m.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
    m.add_raw_input_contents("\x01");
    EXPECT_EQ(decode(m, r).code(), absl::StatusCode::kInvalidArgument);  // mix
  }
  {
    auto m = base();
    m.add_raw_input_contents("\x01");
    m.add_raw_input_contents("\x02");
    EXPECT_EQ(decode(m, r).code(), absl::StatusCode::kInvalidArgument);  // count mismatch
  }
}

TEST(KServeGrpcDecode, WrongWireTypes) {
  // model_name (field 1) as a varint; inputs (field 5) as fixed32; shape as fixed64.
  for (const std::string& wire : {std::string("\x08\x01", 2), std::string("\x2d\0\0\0\0", 5),
                                  std::string("\x2a\x09\x19\0\0\0\0\0\0\0\0", 11)}) {
    backends::InferRequest r;
    EXPECT_EQ(decodeModelInferRequest(wire, r).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(KServeGrpcDecode, TruncationAtEveryByteIsAnErrorNotACrash) {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  auto* in = m.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype("INT64");
  in->add_shape(3);
  for (int64_t v : {1ll, -1ll, 1ll << 50}) in->mutable_contents()->add_int64_contents(v);
  (*m.mutable_parameters())["priority"].set_int64_param(1);
  const std::string wire = m.SerializeAsString();
  backends::InferRequest full;
  ASSERT_TRUE(decodeModelInferRequest(wire, full).ok());
  size_t errors = 0;
  for (size_t n = 1; n < wire.size(); ++n) {
    backends::InferRequest r;
    if (!decodeModelInferRequest(std::string_view(wire.data(), n), r).ok()) ++errors;
  }
  // Every strict prefix is an error except the two that end between top-level fields (after
  // model_name and after parameters: a valid, shorter message).
  EXPECT_EQ(errors, wire.size() - 1 - 2);
  // A truncated varint alone.
  backends::InferRequest r;
  EXPECT_FALSE(decodeModelInferRequest(std::string("\x2a\xff", 2), r).ok());
}

TEST(KServeGrpcEncode, ResponseReadsBackWithProtobuf) {
  backends::InferResponse resp;
  resp.model_name = "m";
  resp.model_version = "3";
  resp.id = "r1";
  backends::Tensor a;
  a.name = "A";
  a.dtype = DataType::kInt32;
  a.shape = {2, 1};
  a.data = le<int32_t>({7, -7});
  backends::Tensor b = a;
  b.name = "B";
  resp.outputs = {a, b};
  resp.requested = {{"B", true}};
  std::string framed;
  encodeModelInferResponse(resp, framed);
  ASSERT_GT(framed.size(), kGrpcPrefixBytes);
  const uint32_t len = (uint8_t(framed[1]) << 24) | (uint8_t(framed[2]) << 16) |
                       (uint8_t(framed[3]) << 8) | uint8_t(framed[4]);
  EXPECT_EQ(len, framed.size() - kGrpcPrefixBytes);
  inference::ModelInferResponse m;
  ASSERT_TRUE(m.ParseFromString(framed.substr(kGrpcPrefixBytes)));
  EXPECT_EQ(m.model_name(), "m");
  EXPECT_EQ(m.model_version(), "3");
  EXPECT_EQ(m.id(), "r1");
  ASSERT_EQ(m.outputs_size(), 1);  // only the requested output
  EXPECT_EQ(m.outputs(0).name(), "B");
  EXPECT_EQ(m.outputs(0).datatype(), "INT32");
  EXPECT_EQ(std::vector<int64_t>(m.outputs(0).shape().begin(), m.outputs(0).shape().end()),
            (std::vector<int64_t>{2, 1}));
  ASSERT_EQ(m.raw_output_contents_size(), 1);
  EXPECT_EQ(m.raw_output_contents(0), std::string(b.data.begin(), b.data.end()));

  std::string s;
  encodeModelStreamInferResponse(&resp, {}, s);
  encodeModelStreamInferResponse(nullptr, "boom", s);
  inference::ModelStreamInferResponse sm;
  const size_t first = 5 + ((uint8_t(s[3]) << 8) | uint8_t(s[4]));
  ASSERT_TRUE(sm.ParseFromString(s.substr(5, first - 5)));
  EXPECT_EQ(sm.infer_response().outputs(0).name(), "B");
  ASSERT_TRUE(sm.ParseFromString(s.substr(first + 5)));
  EXPECT_EQ(sm.error_message(), "boom");
}

}  // namespace
}  // namespace infergate::frontend

namespace infergate::frontend {
namespace {

// Issue 16: typed contents are measured in the header pass (Tensor::slot_bytes), placed, and
// decoded straight into the slot's typed elements (one copy); a header hook may refuse before
// anything is written.
TEST(KServeGrpcDecode, TypedContentsAreDecodedStraightIntoSlots) {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  auto* a = m.add_inputs();
  a->set_name("I16");
  a->set_datatype("INT16");
  a->add_shape(3);
  for (int v : {1, -2, 300}) a->mutable_contents()->add_int_contents(v);
  auto* b = m.add_inputs();
  b->set_name("S");
  b->set_datatype("BYTES");
  b->add_shape(1);
  b->mutable_contents()->add_bytes_contents("hey");
  std::vector<uint8_t> arena(32, 0xEE);
  backends::InputPlacer place = [&](backends::InferRequest& r) {
    EXPECT_EQ(r.inputs[0].slot_bytes, 6u);
    EXPECT_EQ(r.inputs[1].slot_bytes, 7u);
    r.inputs[0].slot = arena.data();
    r.inputs[1].slot = arena.data() + 6;
    return true;
  };
  backends::InferRequest r;
  uint64_t copied = 0;
  ASSERT_TRUE(decodeModelInferRequest(m.SerializeAsString(), r, &copied, &place).ok());
  EXPECT_EQ(copied, 13u);
  EXPECT_TRUE(r.inputs[0].data.empty());
  EXPECT_EQ(r.inputs[0].slot, arena.data());
  const auto i16 = le<int16_t>({1, -2, 300});
  EXPECT_EQ(std::vector<uint8_t>(arena.begin(), arena.begin() + 6), i16);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(arena.data() + 6), 7),
            std::string("\x03\x00\x00\x00hey", 7));
  EXPECT_EQ(arena[13], 0xEE);
}

TEST(KServeGrpcDecode, HeaderHookRefusesBeforeAnyWrite) {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  auto* a = m.add_inputs();
  a->set_name("A");
  a->set_datatype("UINT8");
  a->add_shape(2);
  m.add_raw_input_contents("ab");
  int calls = 0;
  const HeaderHook hook = [&](backends::InferRequest& r) {
    ++calls;
    EXPECT_EQ(r.inputs[0].slot_bytes, 2u);
    return absl::ResourceExhaustedError("over quota");
  };
  backends::InferRequest r;
  const absl::Status st = decodeModelInferRequest(m.SerializeAsString(), r, nullptr, &hook);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(r.inputs[0].data.empty());
}

}  // namespace
}  // namespace infergate::frontend
