#include "frontend/kserve_json.h"

#include <gtest/gtest.h>

#include <charconv>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "frontend/fp16.h"
#include "frontend/tensor_json.h"
#include "simdjson.h"

namespace infergate::frontend {
namespace {

using backends::DataType;
using backends::InferRequest;
using backends::InferResponse;
using backends::ModelConfig;
using backends::RequestedOutput;
using backends::Tensor;
using backends::TensorSpec;

// ---- helpers ---------------------------------------------------------------------------------

const ModelConfig& noModel() {
  static const ModelConfig m;
  return m;
}

absl::StatusOr<InferRequest> decode(std::string_view body,
                                    std::optional<size_t> header_length = std::nullopt,
                                    const ModelConfig& model = noModel()) {
  return decodeInferRequest(body, header_length, model, "m", "1");
}

// A request with one input.
std::string oneInput(std::string_view name, std::string_view shape, std::string_view dtype,
                     std::string_view data) {
  return "{\"inputs\":[{\"name\":\"" + std::string(name) + "\",\"shape\":" + std::string(shape) +
         ",\"datatype\":\"" + std::string(dtype) + "\",\"data\":" + std::string(data) + "}]}";
}

template <typename T>
std::vector<uint8_t> le(std::initializer_list<T> values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  size_t i = 0;
  for (T v : values) std::memcpy(out.data() + sizeof(T) * i++, &v, sizeof(T));
  return out;
}

std::vector<uint8_t> bytesLayout(std::initializer_list<std::string_view> elems) {
  std::vector<uint8_t> out;
  for (std::string_view e : elems) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    const auto* p = reinterpret_cast<const uint8_t*>(&n);
    out.insert(out.end(), p, p + 4);
    out.insert(out.end(), e.begin(), e.end());
  }
  return out;
}

std::string asString(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

void expectInvalid(const absl::StatusOr<InferRequest>& r, std::string_view message) {
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << message;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(std::string(message)), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << message;
}

Tensor tensor(std::string name, DataType dtype, std::vector<int64_t> shape,
              std::vector<uint8_t> data) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

InferResponse response(std::vector<Tensor> outputs) {
  InferResponse r;
  r.model_name = "m";
  r.model_version = "1";
  r.outputs = std::move(outputs);
  return r;
}

// ---- decode: every datatype ------------------------------------------------------------------

struct DtypeCase {
  const char* dtype;
  const char* elems[4];  // JSON text of four elements
  std::vector<uint8_t> bytes;
};

std::vector<DtypeCase> dtypeCases() {
  return {
      {"BOOL", {"true", "false", "false", "true"}, {1, 0, 0, 1}},
      {"UINT8", {"0", "1", "254", "255"}, le<uint8_t>({0, 1, 254, 255})},
      {"UINT16", {"0", "1", "65534", "65535"}, le<uint16_t>({0, 1, 65534, 65535})},
      {"UINT32", {"0", "1", "4294967294", "4294967295"},
       le<uint32_t>({0, 1, 4294967294u, 4294967295u})},
      {"UINT64", {"0", "9223372036854775807", "9223372036854775808", "18446744073709551615"},
       le<uint64_t>({0, 9223372036854775807ull, 9223372036854775808ull, 18446744073709551615ull})},
      {"INT8", {"-128", "-1", "0", "127"}, le<int8_t>({-128, -1, 0, 127})},
      {"INT16", {"-32768", "-1", "0", "32767"}, le<int16_t>({-32768, -1, 0, 32767})},
      {"INT32", {"-2147483648", "-1", "0", "2147483647"},
       le<int32_t>({std::numeric_limits<int32_t>::min(), -1, 0, 2147483647})},
      {"INT64", {"-9223372036854775808", "-1", "0", "9223372036854775807"},
       le<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0,
                    std::numeric_limits<int64_t>::max()})},
      {"FP16", {"1", "-2", "0.1", "65504"}, le<uint16_t>({0x3C00, 0xC000, 0x2E66, 0x7BFF})},
      {"BF16", {"1", "-2", "0.1", "3.0"}, le<uint16_t>({0x3F80, 0xC000, 0x3DCD, 0x4040})},
      {"FP32", {"1", "-2.5", "0.1", "3.4028235e38"}, le<float>({1.0f, -2.5f, 0.1f, 3.4028235e38f})},
      {"FP64", {"1", "-2.5", "0.1", "1e308"}, le<double>({1.0, -2.5, 0.1, 1e308})},
      {"BYTES", {"\"a\"", "\"\"", "\"h\\u00e9llo\"", "\"x\\\"y\""},
       bytesLayout({"a", "", "h\xc3\xa9llo", "x\"y"})},
  };
}

TEST(KserveJsonDecode, EveryDatatypeFlat) {
  for (const DtypeCase& c : dtypeCases()) {
    SCOPED_TRACE(c.dtype);
    std::string data = std::string("[") + c.elems[0] + "," + c.elems[1] + "," + c.elems[2] + "," +
                       c.elems[3] + "]";
    auto r = decode(oneInput("x", "[4]", c.dtype, data));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->inputs.size(), 1u);
    const Tensor& t = r->inputs[0];
    EXPECT_EQ(t.name, "x");
    EXPECT_EQ(backends::dataTypeName(t.dtype), c.dtype);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(t.data, c.bytes);
  }
}

TEST(KserveJsonDecode, EveryDatatypeNested) {
  for (const DtypeCase& c : dtypeCases()) {
    SCOPED_TRACE(c.dtype);
    std::string data = std::string("[[") + c.elems[0] + "," + c.elems[1] + "],[" + c.elems[2] +
                       "," + c.elems[3] + "]]";
    auto r = decode(oneInput("x", "[2,2]", c.dtype, data));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(r->inputs[0].data, c.bytes);
  }
}

TEST(KserveJsonDecode, Rank3NestedAndFlatAgree) {
  auto nested = decode(oneInput("x", "[2,2,2]", "INT32", "[[[1,2],[3,4]],[[5,6],[7,8]]]"));
  auto flat = decode(oneInput("x", "[2,2,2]", "INT32", "[1,2,3,4,5,6,7,8]"));
  ASSERT_TRUE(nested.ok()) << nested.status();
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(nested->inputs[0].data, le<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(flat->inputs[0].data, nested->inputs[0].data);
}

TEST(KserveJsonDecode, ScalarAndEmptyShapes) {
  auto scalar = decode(oneInput("x", "[]", "INT16", "[-7]"));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_TRUE(scalar->inputs[0].shape.empty());
  EXPECT_EQ(scalar->inputs[0].data, le<int16_t>({-7}));

  auto empty = decode(oneInput("x", "[0,3]", "FP32", "[]"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->inputs[0].data.empty());
}

TEST(KserveJsonDecode, SetsModelAndRequestFields) {
  auto r = decodeInferRequest(
      R"({"id":"req-7","parameters":{"binary_data_output":true,"priority":2,"timeout":5000,
          "sequence_id":3,"custom":"x"},
          "inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1],
                     "parameters":{"other":1}}],
          "outputs":[{"name":"OUT","parameters":{"binary_data":true}},{"name":"B"}]})",
      std::nullopt, noModel(), "resnet", "3");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model_name, "resnet");
  EXPECT_EQ(r->model_version, "3");
  EXPECT_EQ(r->id, "req-7");
  EXPECT_TRUE(r->binary_data_output);
  EXPECT_EQ(r->priority, 2);
  EXPECT_EQ(r->timeout_us, 5000u);
  EXPECT_EQ(r->protocol, net::Protocol::kHttpKserve);
  ASSERT_EQ(r->outputs.size(), 2u);
  EXPECT_EQ(r->outputs[0].name, "OUT");
  EXPECT_TRUE(r->outputs[0].binary);
  EXPECT_EQ(r->outputs[1].name, "B");
  EXPECT_FALSE(r->outputs[1].binary);
}

TEST(KserveJsonDecode, DefaultsWithoutParameters) {
  auto r = decode(oneInput("x", "[1]", "INT8", "[1]"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "");
  EXPECT_FALSE(r->binary_data_output);
  EXPECT_EQ(r->priority, 0);
  EXPECT_EQ(r->timeout_us, 0u);
  EXPECT_TRUE(r->outputs.empty());
}

TEST(KserveJsonDecode, RequestParameterTypeErrors) {
  auto with = [](std::string params) {
    return decode("{\"parameters\":" + params +
                  ",\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]}]}");
  };
  expectInvalid(with(R"({"binary_data_output":1})"),
                "request parameter 'binary_data_output' must be a boolean, got 1");
  expectInvalid(with(R"({"priority":-1})"),
                "request parameter 'priority' must be a non-negative integer, got -1");
  expectInvalid(with(R"({"priority":1.5})"), "'priority' must be a non-negative integer");
  expectInvalid(with(R"({"priority":"high"})"), "'priority' must be a non-negative integer");
  expectInvalid(with(R"({"timeout":"5s"})"), "request parameter 'timeout' must be a non-negative");
  expectInvalid(with(R"({"timeout":-5})"), "'timeout' must be a non-negative integer");
  expectInvalid(with(R"({"priority":9223372036854775808})"), "'priority' must be a non-negative");
  expectInvalid(with(R"([1])"), "request 'parameters' must be an object");
}

TEST(KserveJsonDecode, OutputErrors) {
  const std::string in = R"("inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1]}])";
  expectInvalid(decode("{" + in + R"(,"outputs":[{"parameters":{}}]})"), "output #0: missing 'name'");
  expectInvalid(decode("{" + in + R"(,"outputs":[{"name":"o","parameters":{"binary_data":1}}]})"),
                "output #0: binary_data must be a boolean, got 1");
  expectInvalid(decode("{" + in + R"(,"outputs":{"name":"o"}})"), "request 'outputs' must be an array");
  expectInvalid(decode("{" + in + R"(,"outputs":["o"]})"), "output #0: expected an object");
}

// ---- decode: range and type strictness -------------------------------------------------------

TEST(KserveJsonDecode, IntegerRangeErrors) {
  struct Case {
    const char* dtype;
    const char* value;
  };
  const Case cases[] = {
      {"UINT8", "256"},          {"UINT8", "-1"},
      {"UINT16", "65536"},       {"UINT16", "-1"},
      {"UINT32", "4294967296"},  {"UINT32", "-1"},
      {"UINT64", "-1"},          {"INT8", "128"},
      {"INT8", "-129"},          {"INT16", "32768"},
      {"INT16", "-32769"},       {"INT32", "2147483648"},
      {"INT32", "-2147483649"},  {"INT64", "9223372036854775808"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.dtype) + " " + c.value);
    auto r = decode(oneInput("INPUT0", "[2]", c.dtype, std::string("[0,") + c.value + "]"));
    expectInvalid(r, std::string("input 'INPUT0': value ") + c.value + " out of range for " +
                         c.dtype);
  }
  // Beyond uint64: not representable as an integer at all.
  EXPECT_FALSE(decode(oneInput("x", "[1]", "UINT64", "[18446744073709551616]")).ok());
}

TEST(KserveJsonDecode, IntegersRejectFractions) {
  for (const char* dtype : {"UINT8", "UINT64", "INT8", "INT32", "INT64"}) {
    SCOPED_TRACE(dtype);
    expectInvalid(decode(oneInput("x", "[1]", dtype, "[1.5]")),
                  std::string("input 'x': value 1.5 is not an integer, as ") + dtype + " requires");
    expectInvalid(decode(oneInput("x", "[1]", dtype, "[1.0]")), "is not an integer");
    expectInvalid(decode(oneInput("x", "[1]", dtype, "[\"1\"]")),
                  std::string("input 'x': expected a number for ") + dtype + ", got \"1\"");
    expectInvalid(decode(oneInput("x", "[1]", dtype, "[true]")), "expected a number");
  }
}

TEST(KserveJsonDecode, BoolIsStrict) {
  expectInvalid(decode(oneInput("b", "[1]", "BOOL", "[1]")),
                "input 'b': expected true or false for BOOL, got 1");
  expectInvalid(decode(oneInput("b", "[1]", "BOOL", "[0]")), "expected true or false for BOOL");
  expectInvalid(decode(oneInput("b", "[1]", "BOOL", "[\"true\"]")), "expected true or false");
  expectInvalid(decode(oneInput("b", "[1]", "BOOL", "[null]")), "got null");
}

TEST(KserveJsonDecode, FloatTypeChecks) {
  expectInvalid(decode(oneInput("f", "[1]", "FP32", "[\"1.0\"]")),
                "input 'f': expected a number for FP32, got \"1.0\"");
  expectInvalid(decode(oneInput("f", "[1]", "FP32", "[null]")), "expected a number for FP32");
  expectInvalid(decode(oneInput("f", "[1]", "FP32", "[1e39]")),
                "input 'f': value 1e+39 out of range for FP32");
  expectInvalid(decode(oneInput("f", "[1]", "FP16", "[65520]")),
                "input 'f': value 65520 out of range for FP16");
  expectInvalid(decode(oneInput("f", "[1]", "BF16", "[3.4e38]")), "out of range for BF16");
  expectInvalid(decode(oneInput("s", "[1]", "BYTES", "[5]")),
                "input 's': expected a string for BYTES, got 5");
  // Large integers convert to floats; FP64 keeps doubles exactly.
  auto r = decode(oneInput("f", "[2]", "FP32", "[16777217,18446744073709551615]"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].data, le<float>({16777216.0f, 18446744073709551616.0f}));
  // 65519 rounds down to the largest FP16; subnormals round to nearest.
  auto h = decode(oneInput("f", "[3]", "FP16", "[65519,5.960464477539063e-8,-0.0]"));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->inputs[0].data, le<uint16_t>({0x7BFF, 0x0001, 0x8000}));
}

TEST(KserveJsonDecode, Fp16FromDoubleAvoidsDoubleRounding) {
  // 1 + 2^-11 + 2^-40: just above the midpoint between FP16 1.0 and 1.0009765625. Rounding via
  // float first would land on the midpoint and tie to even (0x3C00); correct is 0x3C01.
  auto r = decode(oneInput("f", "[1]", "FP16", "[1.0004882812509094947017729282379150390625]"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].data, le<uint16_t>({0x3C01}));
  // Same for BF16: 1 + 2^-8 + 2^-40 -> 0x3F81.
  auto b = decode(oneInput("f", "[1]", "BF16", "[1.0039062500009094947017729282379150390625]"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->inputs[0].data, le<uint16_t>({0x3F81}));
}

// ---- decode: shape and structure -------------------------------------------------------------

TEST(KserveJsonDecode, ShapeMismatch) {
  std::string data = "[";
  for (int i = 0; i < 15; ++i) data += (i ? ",1" : "1");
  data += "]";
  auto r = decode(oneInput("INPUT0", "[1,16]", "FP32", data));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "input 'INPUT0': expected 16 elements for shape [1,16], got 15");
  expectInvalid(decode(oneInput("x", "[2]", "INT32", "[1,2,3]")),
                "expected 2 elements for shape [2], got 3");
}

TEST(KserveJsonDecode, NestedShapeDisagreement) {
  expectInvalid(decode(oneInput("x", "[2,3]", "INT32", "[[1,2,3],[4,5]]")),
                "input 'x': data nesting does not match shape [2,3]: dimension 1 has 2 elements, "
                "expected 3");
  expectInvalid(decode(oneInput("x", "[2,3]", "INT32", "[[1,2],[3,4],[5,6]]")),
                "dimension 0 has 3 elements, expected 2");
  expectInvalid(decode(oneInput("x", "[2,3]", "INT32", "[[1,2,3],4]")),
                "expected an array at dimension 1, got 4");
  expectInvalid(decode(oneInput("x", "[2,3]", "INT32", "[[1,2,3],[4,[5],6]]")),
                "data nesting does not match shape [2,3]: found an array where a value was expected");
  expectInvalid(decode(oneInput("x", "[2]", "INT32", "[[1],[2]]")), "data nesting does not match");
  expectInvalid(decode(oneInput("x", "[2,3]", "BYTES", "[[\"a\",\"b\"],[\"c\",\"d\"]]")),
                "dimension 1 has 2 elements, expected 3");
}

TEST(KserveJsonDecode, HugeShapesFailWithoutAllocating) {
  expectInvalid(decode(oneInput("x", "[4294967296,4294967296,4294967296]", "FP32", "[1]")),
                "input 'x': shape [4294967296,4294967296,4294967296] has too many elements");
  expectInvalid(decode(oneInput("x", "[1000000000000]", "FP64", "[1]")),
                "expected 1000000000000 elements for shape [1000000000000], got 1");
  expectInvalid(decode(oneInput("x", "[1000000000,1000000000]", "FP64", "[[1]]")),
                "data nesting does not match shape [1000000000,1000000000]");
  expectInvalid(decode(oneInput("x", "[1000000000,1000000000]", "BYTES", "[[\"a\"]]")),
                "data nesting does not match shape");
  expectInvalid(decode(oneInput("x", "[18446744073709551615]", "FP32", "[1]")),
                "shape dimension 18446744073709551615 is too large");
}

TEST(KserveJsonDecode, MissingAndMalformedFields) {
  expectInvalid(decode("{}"), "request has no 'inputs'");
  expectInvalid(decode(R"({"inputs":{}})"), "request 'inputs' must be an array");
  expectInvalid(decode(R"({"inputs":[5]})"), "input #0: expected an object, got 5");
  expectInvalid(decode(R"({"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]})"),
                "input #0: missing 'name'");
  expectInvalid(decode(R"({"inputs":[{"name":3,"shape":[1],"datatype":"FP32","data":[1]}]})"),
                "input #0: 'name' must be a string");
  expectInvalid(decode(R"({"inputs":[{"name":"a","shape":[1],"data":[1]}]})"),
                "input 'a': missing 'datatype'");
  expectInvalid(decode(R"({"inputs":[{"name":"a","datatype":"FP32","data":[1]}]})"),
                "input 'a': missing 'shape'");
  expectInvalid(decode(R"({"inputs":[{"name":"a","shape":[1],"datatype":"FP32"}]})"),
                "input 'a': missing 'data'");
  expectInvalid(decode(oneInput("a", "[1]", "FLOAT32", "[1]")),
                "input 'a': unknown datatype 'FLOAT32'");
  expectInvalid(decode(oneInput("a", "[1]", "fp32", "[1]")), "unknown datatype 'fp32'");
  expectInvalid(decode(oneInput("a", "[-1]", "FP32", "[1]")),
                "input 'a': shape dimension -1 is negative");
  expectInvalid(decode(oneInput("a", "[1.5]", "FP32", "[1]")),
                "input 'a': shape dimensions must be integers, got 1.5");
  expectInvalid(decode(oneInput("a", "4", "FP32", "[1]")), "'shape' must be an array of integers");
  expectInvalid(decode(oneInput("a", "[1]", "FP32", "1")), "input 'a': 'data' must be an array");
  expectInvalid(decode(R"({"id":5,"inputs":[]})"), "request 'id' must be a string, got 5");
  expectInvalid(decode("[1,2]"), "request body must be a JSON object");
  expectInvalid(decode(R"({"inputs":[)"), "malformed JSON request body");
  expectInvalid(decode(""), "malformed JSON request body");
  expectInvalid(decode("{\"inputs\":[]} trailing"), "malformed JSON request body");
  // A second input's error names that input.
  expectInvalid(decode(R"({"inputs":[{"name":"a","shape":[1],"datatype":"INT8","data":[1]},
                                     {"name":"b","shape":[1],"datatype":"INT8","data":[300]}]})"),
                "input 'b': value 300 out of range for INT8");
}

TEST(KserveJsonDecode, LargeBodyUsesOwnParser) {
  // > 1 MiB of JSON: parsed by a one-off parser; result identical.
  const int n = 200000;
  std::string data = "[";
  std::vector<uint8_t> want;
  want.reserve(n * 4);
  for (int i = 0; i < n; ++i) {
    if (i) data += ",";
    const float v = static_cast<float>(i) * 0.25f + 0.125f;
    data += std::to_string(v);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    want.insert(want.end(), p, p + 4);
  }
  data += "]";
  const std::string body = oneInput("x", "[1," + std::to_string(n) + "]", "FP32", data);
  ASSERT_GT(body.size(), size_t{1} << 20);
  auto r = decode(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].data, want);
  // And the thread_local parser still works afterwards.
  auto small = decode(oneInput("y", "[1]", "UINT8", "[9]"));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->inputs[0].data, (std::vector<uint8_t>{9}));
}

TEST(KserveJsonDecode, MutatedBodiesNeverCrash) {
  // Truncations and byte flips of valid bodies: every result is OK or INVALID_ARGUMENT (run under
  // ASan/UBSan to catch memory errors).
  const std::string json = R"({"id":"a","parameters":{"priority":1},"inputs":[
      {"name":"a","shape":[2,2],"datatype":"FP16","data":[[1,2],[3,4]]},
      {"name":"b","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":12}},
      {"name":"c","shape":[1,2],"datatype":"INT64","data":[[-1,9]]}],
      "outputs":[{"name":"o","parameters":{"binary_data":true}}]})";
  const std::string body = json + asString(bytesLayout({"xy", "z\n"}));
  ASSERT_TRUE(decode(body, json.size()).ok()) << decode(body, json.size()).status();
  const char flips[] = {'[', ']', '{', '}', '"', ',', '0', '-', '9', '\0', 'e', '.', '\xff'};
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string m = body;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) m[rng() % m.size()] = flips[rng() % sizeof flips];
    if (rng() % 4 == 0) m.resize(rng() % m.size());
    const size_t hl = std::min(json.size(), m.size());
    auto r = decode(m, rng() % 2 ? std::optional<size_t>(hl) : std::nullopt);
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    }
  }
}

// ---- decode: binary tensor extension ---------------------------------------------------------

TEST(KserveJsonBinary, SingleInput) {
  const std::string json =
      R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]})";
  const auto bytes = le<float>({1.5f, -3.0f});
  const std::string body = json + asString(bytes);
  auto r = decode(body, json.size());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].data, bytes);
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2}));
}

TEST(KserveJsonBinary, MultipleAndMixedInputs) {
  const std::string json = R"({"inputs":[
      {"name":"a","shape":[2],"datatype":"INT16","parameters":{"binary_data_size":4}},
      {"name":"j","shape":[1],"datatype":"UINT8","data":[7]},
      {"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":13}},
      {"name":"b","shape":[1,1],"datatype":"BOOL","parameters":{"binary_data_size":1}}]})";
  const auto a = le<int16_t>({-2, 300});
  const auto s = bytesLayout({"hi", std::string_view("\x00\xff\x01", 3)});
  ASSERT_EQ(s.size(), 13u);
  const std::string body = json + asString(a) + asString(s) + std::string(1, '\x01');
  auto r = decode(body, json.size());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->inputs[0].data, a);
  EXPECT_EQ(r->inputs[1].data, (std::vector<uint8_t>{7}));
  EXPECT_EQ(r->inputs[2].data, s);
  EXPECT_EQ(r->inputs[3].data, (std::vector<uint8_t>{1}));
}

TEST(KserveJsonBinary, HeaderLengthEqualToBodyIsPlainJson) {
  const std::string body = oneInput("x", "[1]", "INT8", "[3]");
  auto r = decode(body, body.size());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].data, (std::vector<uint8_t>{3}));
}

TEST(KserveJsonBinary, Errors) {
  const std::string j64 =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":64}}]})";
  auto truncated = decode(j64 + std::string(10, 'x'), j64.size());
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().message(),
            "input 'INPUT0': binary_data_size 64 exceeds the remaining 10 bytes of the request body");

  expectInvalid(decode(j64 + std::string(70, 'x'), j64.size()),
                "6 bytes after the JSON header are not claimed by any input's binary_data_size");

  const std::string j60 =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":60}}]})";
  expectInvalid(decode(j60 + std::string(60, 'x'), j60.size()),
                "input 'INPUT0': binary_data_size 60 does not match shape [1,16] of FP32 (64 bytes)");

  ASSERT_EQ(j64.size(), 100u);
  expectInvalid(decode(j64, 101), "Inference-Header-Content-Length 101 exceeds the body length 100");

  expectInvalid(decode(j64),
                "input 'INPUT0': has binary_data_size but the request has no "
                "Inference-Header-Content-Length header");

  const std::string both =
      R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1],"parameters":{"binary_data_size":1}}]})";
  expectInvalid(decode(both + "x", both.size()), "input 'x': has both 'data' and binary_data_size");

  const std::string neg =
      R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","parameters":{"binary_data_size":-1}}]})";
  expectInvalid(decode(neg + "x", neg.size()),
                "input 'x': binary_data_size must be a non-negative integer, got -1");

  // Leftover bytes without any binary input.
  const std::string plain = oneInput("x", "[1]", "INT8", "[1]");
  expectInvalid(decode(plain + "zz", plain.size()), "2 bytes after the JSON header");

  // A huge shape with a small binary part.
  const std::string huge =
      R"({"inputs":[{"name":"x","shape":[2305843009213693952,4],"datatype":"FP64","parameters":{"binary_data_size":8}}]})";
  expectInvalid(decode(huge + std::string(8, 'x'), huge.size()),
                "binary_data_size 8 does not match shape [2305843009213693952,4] of FP64 (too many bytes)");
}

TEST(KserveJsonBinary, BytesLayoutValidation) {
  auto req = [](size_t n, std::string_view shape) {
    return "{\"inputs\":[{\"name\":\"s\",\"shape\":" + std::string(shape) +
           ",\"datatype\":\"BYTES\",\"parameters\":{\"binary_data_size\":" + std::to_string(n) +
           "}}]}";
  };
  // Second element claims 9 bytes, only 2 present.
  std::string bad = asString(bytesLayout({"abc"}));
  bad += std::string("\x09\x00\x00\x00", 4) + "xy";
  std::string j = req(bad.size(), "[2]");
  expectInvalid(decode(j + bad, j.size()),
                "input 's': binary data: BYTES element 1 declares 9 bytes but only 2 remain");
  // Truncated length prefix.
  std::string trunc = asString(bytesLayout({"abc"})) + std::string("\x01\x00", 2);
  j = req(trunc.size(), "[2]");
  expectInvalid(decode(j + trunc, j.size()), "BYTES element 1 has a truncated length prefix");
  // Count mismatch.
  std::string three = asString(bytesLayout({"a", "b", "c"}));
  j = req(three.size(), "[2]");
  expectInvalid(decode(j + three, j.size()),
                "input 's': binary data holds 3 BYTES elements, shape [2] needs 2");
}

// ---- decode: raw binary (Inference-Header-Content-Length: 0) -----------------------------------

ModelConfig singleInputModel(DataType dtype, std::vector<int64_t> shape, int max_batch) {
  ModelConfig m;
  m.name = "raw";
  m.max_batch_size = max_batch;
  m.inputs.push_back(TensorSpec{"IN", dtype, std::move(shape)});
  m.outputs.push_back(TensorSpec{"OUT", dtype, {-1}});
  return m;
}

TEST(KserveJsonRaw, BatchedVariableDim) {
  const ModelConfig m = singleInputModel(DataType::kFp32, {-1}, 8);
  const auto bytes = le<float>({1, 2, 3});
  auto r = decode(asString(bytes), 0, m);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].name, "IN");
  EXPECT_EQ(r->inputs[0].dtype, DataType::kFp32);
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(r->inputs[0].data, bytes);
  EXPECT_TRUE(r->binary_data_output);
  EXPECT_TRUE(r->outputs.empty());
}

TEST(KserveJsonRaw, FixedShape) {
  const ModelConfig m = singleInputModel(DataType::kInt16, {2, 2}, 0);
  auto r = decode(asString(le<int16_t>({1, 2, 3, 4})), 0, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 2}));
  expectInvalid(decode(asString(le<int16_t>({1, 2, 3})), 0, m),
                "raw binary request: input 'IN' of shape [2,2] needs 4 elements, the body holds 3");
  expectInvalid(decode("abc", 0, m), "raw binary request: body of 3 bytes is not a whole number");
}

TEST(KserveJsonRaw, VariableDimInMiddle) {
  const ModelConfig m = singleInputModel(DataType::kUint8, {3, -1}, 4);
  auto r = decode("abcdef", 0, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{1, 3, 2}));
  expectInvalid(decode("abcd", 0, m), "raw binary request: 4 elements do not fill input 'IN'");
}

TEST(KserveJsonRaw, Errors) {
  expectInvalid(decode("abcd", 0, singleInputModel(DataType::kUint8, {-1, -1}, 4)),
                "more than one variable dimension");
  ModelConfig two = singleInputModel(DataType::kUint8, {4}, 0);
  two.inputs.push_back(TensorSpec{"IN2", DataType::kUint8, {4}});
  expectInvalid(decode("abcd", 0, two),
                "needs a model with exactly one input; model 'raw' has 2");
  expectInvalid(decode("abcd", 0, noModel()), "has 0");
}

TEST(KserveJsonRaw, Bytes) {
  const ModelConfig m = singleInputModel(DataType::kBytes, {1}, 0);
  const auto body = bytesLayout({"an image"});
  auto r = decode(asString(body), 0, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(r->inputs[0].data, body);
  expectInvalid(decode(std::string("\x05\x00\x00\x00" "ab", 6), 0, m), "BYTES element 0 declares 5 bytes");
  expectInvalid(decode(asString(bytesLayout({"a", "b"})), 0, m), "needs 1 elements, the body holds 2");
}

// ---- encode ------------------------------------------------------------------------------------

TEST(KserveJsonEncode, EveryDatatypeAsJson) {
  std::vector<Tensor> outs;
  outs.push_back(tensor("b", DataType::kBool, {2}, {1, 0}));
  outs.push_back(tensor("u8", DataType::kUint8, {2}, le<uint8_t>({0, 255})));
  outs.push_back(tensor("u16", DataType::kUint16, {1}, le<uint16_t>({65535})));
  outs.push_back(tensor("u32", DataType::kUint32, {1}, le<uint32_t>({4294967295u})));
  outs.push_back(tensor("u64", DataType::kUint64, {1}, le<uint64_t>({18446744073709551615ull})));
  outs.push_back(tensor("i8", DataType::kInt8, {2}, le<int8_t>({-128, 127})));
  outs.push_back(tensor("i16", DataType::kInt16, {1}, le<int16_t>({-32768})));
  outs.push_back(tensor("i32", DataType::kInt32, {1}, le<int32_t>({-2147483647 - 1})));
  outs.push_back(
      tensor("i64", DataType::kInt64, {1}, le<int64_t>({std::numeric_limits<int64_t>::min()})));
  outs.push_back(tensor("h", DataType::kFp16, {3}, le<uint16_t>({0x3C00, 0xC100, 0x2E66})));
  outs.push_back(tensor("bf", DataType::kBf16, {2}, le<uint16_t>({0x3F80, 0xC040})));
  outs.push_back(tensor("f", DataType::kFp32, {2, 2}, le<float>({0.1f, -2.5f, 1e-38f, 3.4028235e38f})));
  outs.push_back(tensor("d", DataType::kFp64, {2}, le<double>({0.1, 1e300})));
  outs.push_back(tensor("s", DataType::kBytes, {2}, bytesLayout({"ab", "q\"\n\x01"})));
  InferResponse r = response(std::move(outs));
  r.id = "r1";
  const EncodedInferResponse enc = encodeInferResponse(r);
  EXPECT_FALSE(enc.json_header_length.has_value());
  EXPECT_EQ(enc.body,
            R"({"model_name":"m","model_version":"1","id":"r1","outputs":[)"
            R"({"name":"b","datatype":"BOOL","shape":[2],"data":[true,false]},)"
            R"({"name":"u8","datatype":"UINT8","shape":[2],"data":[0,255]},)"
            R"({"name":"u16","datatype":"UINT16","shape":[1],"data":[65535]},)"
            R"({"name":"u32","datatype":"UINT32","shape":[1],"data":[4294967295]},)"
            R"({"name":"u64","datatype":"UINT64","shape":[1],"data":[18446744073709551615]},)"
            R"({"name":"i8","datatype":"INT8","shape":[2],"data":[-128,127]},)"
            R"({"name":"i16","datatype":"INT16","shape":[1],"data":[-32768]},)"
            R"({"name":"i32","datatype":"INT32","shape":[1],"data":[-2147483648]},)"
            R"({"name":"i64","datatype":"INT64","shape":[1],"data":[-9223372036854775808]},)"
            R"({"name":"h","datatype":"FP16","shape":[3],"data":[1,-2.5,0.099975586]},)"
            R"({"name":"bf","datatype":"BF16","shape":[2],"data":[1,-3]},)"
            R"({"name":"f","datatype":"FP32","shape":[2,2],"data":[0.1,-2.5,1e-38,3.4028235e+38]},)"
            R"({"name":"d","datatype":"FP64","shape":[2],"data":[0.1,1e+300]},)"
            R"({"name":"s","datatype":"BYTES","shape":[2],"data":["ab","q\"\n\u0001"]}]})");
  // The body is valid JSON.
  simdjson::dom::parser p;
  simdjson::dom::element root;
  EXPECT_FALSE(p.parse(enc.body).get(root));
}

// FP32 "data" is written with the bytes of std::to_chars (shortest round trip), whatever
// formatter the encoder uses: integers, fractions, both signs, both fixed and scientific forms,
// subnormals, the largest and smallest values.
TEST(KserveJsonEncode, Fp32DataMatchesToChars) {
  std::vector<float> values = {1.0f, 16.0f, -3.0f, 0.5f, 0.1f, 100.0f, 1e4f, 1e5f, 123456.0f,
                               1e6f, 16777216.0f, 123456792.0f, 1e-4f, 1.5e-5f, 3.14159265f,
                               -2.71828175f, 1e-45f, 1.17549435e-38f, 3.4028235e38f, 0.0f};
  uint32_t bits = 0x3F800000u;
  for (int i = 0; i < 2000; ++i) {  // a spread of patterns (deterministic)
    bits = bits * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isfinite(f)) values.push_back(f);
  }
  const size_t n = values.size();
  std::vector<uint8_t> data(n * 4);
  std::memcpy(data.data(), values.data(), data.size());
  InferResponse r = response({tensor("f", DataType::kFp32, {static_cast<int64_t>(n)}, data)});
  std::string want = R"({"model_name":"m","model_version":"1","outputs":[{"name":"f","datatype":"FP32","shape":[)" +
                     std::to_string(n) + R"(],"data":[)";
  for (size_t i = 0; i < n; ++i) {
    if (i) want += ',';
    char buf[64];
    want.append(buf, std::to_chars(buf, buf + sizeof buf, values[i]).ptr);
  }
  want += "]}]}";
  EXPECT_EQ(encodeInferResponse(r).body, want);
}

// A BYTES element that is not valid UTF-8 (found by fuzz_kserve_json: the encoder wrote it raw,
// an invalid JSON response) is written as Latin-1 escapes; valid UTF-8 is written as it is.
TEST(KserveJsonEncode, NonUtf8BytesElementsAreEscapedSoTheResponseIsValidJson) {
  std::vector<uint8_t> data;
  for (std::string_view e : {std::string_view("xy\xdd", 3), std::string_view("h\xc3\xa9\"", 4)}) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    data.insert(data.end(), reinterpret_cast<const uint8_t*>(&n),
                reinterpret_cast<const uint8_t*>(&n) + 4);
    data.insert(data.end(), e.begin(), e.end());
  }
  InferResponse r = response({tensor("s", DataType::kBytes, {2}, data)});
  const std::string body = encodeInferResponse(r).body;
  EXPECT_NE(body.find("[\"xy\\u00dd\",\"h\xc3\xa9\\\"\"]"), std::string::npos) << body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  EXPECT_EQ(parser.parse(simdjson::padded_string(body)).get(doc), simdjson::SUCCESS) << body;
}

TEST(KserveJsonEncode, NoIdWhenEmptyAndNonFiniteIsNull) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  InferResponse r = response({tensor("f", DataType::kFp32, {3}, le<float>({nan, -inf, 1.0f})),
                              tensor("h", DataType::kFp16, {2}, le<uint16_t>({0x7C00, 0x7E00})),
                              tensor("d", DataType::kFp64, {1},
                                     le<double>({std::numeric_limits<double>::quiet_NaN()}))});
  const EncodedInferResponse enc = encodeInferResponse(r);
  EXPECT_EQ(enc.body,
            R"({"model_name":"m","model_version":"1","outputs":[)"
            R"({"name":"f","datatype":"FP32","shape":[3],"data":[null,null,1]},)"
            R"({"name":"h","datatype":"FP16","shape":[2],"data":[null,null]},)"
            R"({"name":"d","datatype":"FP64","shape":[1],"data":[null]}]})");
}

TEST(KserveJsonEncode, BinaryOutputsPerRequest) {
  InferResponse r = response({tensor("A", DataType::kFp32, {2}, le<float>({1.5f, 2.0f})),
                              tensor("B", DataType::kInt8, {3}, le<int8_t>({1, -1, 2})),
                              tensor("C", DataType::kUint16, {1}, le<uint16_t>({0xBEEF}))});
  r.requested = {RequestedOutput{"C", true}, RequestedOutput{"B", false},
                 RequestedOutput{"A", true}};
  const EncodedInferResponse enc = encodeInferResponse(r);
  const std::string json =
      R"({"model_name":"m","model_version":"1","outputs":[)"
      R"({"name":"C","datatype":"UINT16","shape":[1],"parameters":{"binary_data_size":2}},)"
      R"({"name":"B","datatype":"INT8","shape":[3],"data":[1,-1,2]},)"
      R"({"name":"A","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]})";
  ASSERT_TRUE(enc.json_header_length.has_value());
  EXPECT_EQ(*enc.json_header_length, json.size());
  EXPECT_EQ(enc.body, json + asString(le<uint16_t>({0xBEEF})) + asString(le<float>({1.5f, 2.0f})));
}

TEST(KserveJsonEncode, BinaryDataOutputMakesAllBinary) {
  InferResponse r = response({tensor("A", DataType::kBytes, {1}, bytesLayout({"xyz"})),
                              tensor("B", DataType::kBool, {2}, {0, 1})});
  r.binary_data_output = true;
  const EncodedInferResponse enc = encodeInferResponse(r);
  const std::string json =
      R"({"model_name":"m","model_version":"1","outputs":[)"
      R"({"name":"A","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":7}},)"
      R"({"name":"B","datatype":"BOOL","shape":[2],"parameters":{"binary_data_size":2}}]})";
  ASSERT_TRUE(enc.json_header_length.has_value());
  EXPECT_EQ(*enc.json_header_length, json.size());
  EXPECT_EQ(enc.body, json + asString(bytesLayout({"xyz"})) + std::string("\x00\x01", 2));
}

TEST(KserveJsonEncode, RequestedSubsetInOrder) {
  InferResponse r = response({tensor("A", DataType::kInt32, {1}, le<int32_t>({1})),
                              tensor("B", DataType::kInt32, {1}, le<int32_t>({2})),
                              tensor("C", DataType::kInt32, {1}, le<int32_t>({3}))});
  r.requested = {RequestedOutput{"C", false}, RequestedOutput{"missing", false},
                 RequestedOutput{"A", false}};
  const EncodedInferResponse enc = encodeInferResponse(r);
  EXPECT_FALSE(enc.json_header_length.has_value());
  EXPECT_EQ(enc.body, R"({"model_name":"m","model_version":"1","outputs":[)"
                      R"({"name":"C","datatype":"INT32","shape":[1],"data":[3]},)"
                      R"({"name":"A","datatype":"INT32","shape":[1],"data":[1]}]})");
}

TEST(KserveJsonEncode, MalformedBytesDoesNotCrash) {
  std::vector<uint8_t> d = bytesLayout({"ok"});
  d.insert(d.end(), {0xFF, 0xFF, 0x00, 0x00, 'x'});  // claims 65535 bytes
  const EncodedInferResponse enc =
      encodeInferResponse(response({tensor("s", DataType::kBytes, {2}, d)}));
  EXPECT_NE(enc.body.find(R"("data":["ok"])"), std::string::npos) << enc.body;
}

// Extracts the flat "data" array of the first output in an encoded JSON body.
std::string firstData(const std::string& body) {
  const size_t b = body.find("\"data\":");
  const size_t e = body.find(']', b);
  return body.substr(b + 7, e - b - 6);
}

template <typename T>
void expectRoundTrip(DataType dtype, const char* dtype_name, const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  const EncodedInferResponse enc = encodeInferResponse(
      response({tensor("x", dtype, {static_cast<int64_t>(values.size())}, bytes)}));
  auto r = decode(oneInput("x", "[" + std::to_string(values.size()) + "]", dtype_name,
                           firstData(enc.body)));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->inputs[0].data.size(), bytes.size());
  for (size_t i = 0; i < values.size(); ++i) {
    T got;
    std::memcpy(&got, r->inputs[0].data.data() + i * sizeof(T), sizeof(T));
    ASSERT_EQ(std::memcmp(&got, &values[i], sizeof(T)), 0)
        << dtype_name << " element " << i << " value " << +values[i];
  }
}

TEST(KserveJsonRoundTrip, Fp32Exact) {
  expectRoundTrip<float>(DataType::kFp32, "FP32",
                         {0.1f, 1e-38f, 3.4028235e38f, -3.4028235e38f, 1.17549435e-38f, 1.4e-45f,
                          -0.0f, 0.0f, 0.3f, 123456.789f, 16777215.0f, 3.14159265f,
                          -1.0e-7f, 2.5e-40f});
}

TEST(KserveJsonRoundTrip, Fp64Exact) {
  expectRoundTrip<double>(DataType::kFp64, "FP64",
                          {0.1, 1e-308, 4.9e-324, 1.7976931348623157e308, -0.0, 1.0 / 3.0,
                           9007199254740993.0, 2.2250738585072014e-308, 1.8446744073709552e19,
                           1e21, 3e20, 123456789012345680000.0, -1e22, 1e23, 4294967296.0 * 4294967296.0});
}

// 100,000 finite values of F from random bit patterns.
template <typename F, typename Bits, typename Rng>
std::vector<F> randomFinite(typename Rng::result_type seed) {
  Rng rng(seed);
  std::vector<F> values;
  while (values.size() < 100000) {
    const F f = std::bit_cast<F>(static_cast<Bits>(rng()));
    if (std::isfinite(f)) values.push_back(f);
  }
  return values;
}

TEST(KserveJsonRoundTrip, Fp32RandomBitPatterns) {
  expectRoundTrip<float>(DataType::kFp32, "FP32", randomFinite<float, uint32_t, std::mt19937>(12345));
}

TEST(KserveJsonRoundTrip, Fp64RandomBitPatterns) {
  expectRoundTrip<double>(DataType::kFp64, "FP64",
                          randomFinite<double, uint64_t, std::mt19937_64>(54321));
}

TEST(KserveJsonRoundTrip, EveryFiniteFp16AndBf16) {
  std::vector<uint16_t> halves, bf16s;
  for (uint32_t v = 0; v <= 0xFFFF; ++v) {
    if ((v & 0x7C00) != 0x7C00) halves.push_back(static_cast<uint16_t>(v));
    if ((v & 0x7F80) != 0x7F80) bf16s.push_back(static_cast<uint16_t>(v));
  }
  expectRoundTrip<uint16_t>(DataType::kFp16, "FP16", halves);
  expectRoundTrip<uint16_t>(DataType::kBf16, "BF16", bf16s);
}

TEST(KserveJsonRoundTrip, IntegersAndBool) {
  expectRoundTrip<int64_t>(DataType::kInt64, "INT64",
                           {std::numeric_limits<int64_t>::min(), -1, 0, 1,
                            std::numeric_limits<int64_t>::max()});
  expectRoundTrip<uint64_t>(DataType::kUint64, "UINT64",
                            {0, 1, std::numeric_limits<uint64_t>::max()});
  expectRoundTrip<uint8_t>(DataType::kBool, "BOOL", {0, 1, 1, 0});
}

// ---- tensor_json.h (the JSON tensor core shared with TF Serving REST) ---------------------------

TEST(TensorJson, FloatElementsPerDatatype) {
  using namespace tensor_json;
  using Fp16 = backends::DataTypeTag<DataType::kFp16>;
  using Bf16 = backends::DataTypeTag<DataType::kBf16>;
  using Fp32 = backends::DataTypeTag<DataType::kFp32>;
  EXPECT_EQ(narrowFloat<Fp16>(1.0), 0x3C00);
  EXPECT_EQ(narrowFloat<Bf16>(1.0), 0x3F80);
  EXPECT_EQ(narrowFloat<Fp32>(0.1), 0.1f);
  EXPECT_TRUE(isInfinite<Fp16>(narrowFloat<Fp16>(65520.0)));   // rounds past 65504
  EXPECT_FALSE(isInfinite<Fp16>(narrowFloat<Fp16>(65504.0)));
  EXPECT_TRUE(isInfinite<Bf16>(0xFF80));
  EXPECT_TRUE(isInfinite<Fp32>(narrowFloat<Fp32>(1e39)));
  EXPECT_EQ(widenFloat<Fp16>(0xC100), -2.5f);
  EXPECT_EQ(widenFloat<Bf16>(0x3F80), 1.0f);
}

TEST(TensorJson, ElementReaderStopsAtATruncatedElement) {
  using namespace tensor_json;
  std::vector<uint8_t> buf;
  appendBytesElement(buf, "ab");
  appendBytesElement(buf, "");
  buf.insert(buf.end(), {5, 0, 0, 0, 'x'});  // declares 5 bytes, holds 1
  ElementReader r(buf.data(), buf.size());
  std::string_view s;
  ASSERT_TRUE(r.nextBytes(s));
  EXPECT_EQ(s, "ab");
  ASSERT_TRUE(r.nextBytes(s));
  EXPECT_EQ(s, "");
  EXPECT_FALSE(r.nextBytes(s));
  EXPECT_EQ(r.remaining(), 5u);  // nothing consumed
  uint32_t len = 0;
  EXPECT_TRUE(r.next(len));
  EXPECT_EQ(len, 5u);
  EXPECT_FALSE(r.next(len));
}

// ---- fp16.h --------------------------------------------------------------------------------------

TEST(Fp16, FloatToHalfRounding) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);  // the tie rounds to even: Inf
  EXPECT_EQ(floatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);      // tie to even: 0
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);      // 1.5 ulps: tie to even: 2
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);      // smallest normal
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie: even
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie: even (up)
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  const uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(Fp16, HalfToFloatExactForAll) {
  for (uint32_t v = 0; v <= 0xFFFF; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    const float f = halfToFloat(h);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(floatToHalf(f), h) << std::hex << v;
  }
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
}

TEST(Fp16, Bf16) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie: even
  EXPECT_EQ(floatToBf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie: even (up)
  EXPECT_EQ(floatToBf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  const uint16_t nan = floatToBf16(std::bit_cast<float>(0x7F800001u));  // signalling NaN
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
  EXPECT_EQ(bf16ToFloat(0xC040), -3.0f);
  EXPECT_EQ(doubleToBf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81);
  EXPECT_EQ(doubleToHalf(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01);
  EXPECT_EQ(doubleToHalf(1.0 + std::ldexp(1.0, -11)), 0x3C00);
  EXPECT_EQ(doubleToHalf(-1e-30), 0x8000);
}

// ---- metadata ------------------------------------------------------------------------------------

TEST(KserveJsonMetadata, Model) {
  ModelConfig m;
  m.name = "resnet";
  m.version = "2";
  m.platform = "onnxruntime_onnx";
  m.max_batch_size = 8;
  m.inputs.push_back(TensorSpec{"in\"0", DataType::kFp32, {3, -1}});
  m.outputs.push_back(TensorSpec{"out", DataType::kBytes, {1}});
  const std::string body = encodeModelMetadata(m);
  EXPECT_EQ(body, R"({"name":"resnet","versions":["2"],"platform":"onnxruntime_onnx",)"
                  R"("inputs":[{"name":"in\"0","datatype":"FP32","shape":[-1,3,-1]}],)"
                  R"("outputs":[{"name":"out","datatype":"BYTES","shape":[-1,1]}]})");
  simdjson::dom::parser p;
  simdjson::dom::element root;
  ASSERT_FALSE(p.parse(body).get(root));
  std::string_view name;
  ASSERT_FALSE(root["inputs"].at(0)["name"].get(name));
  EXPECT_EQ(name, "in\"0");
  int64_t dim = 0;
  ASSERT_FALSE(root["inputs"].at(0)["shape"].at(0).get(dim));
  EXPECT_EQ(dim, -1);

  ModelConfig nobatch;
  nobatch.name = "id";
  nobatch.inputs.push_back(TensorSpec{"x", DataType::kInt8, {4}});
  EXPECT_EQ(encodeModelMetadata(nobatch),
            R"({"name":"id","versions":["1"],"platform":"infergate_identity",)"
            R"("inputs":[{"name":"x","datatype":"INT8","shape":[4]}],"outputs":[]})");
}

TEST(KserveJsonMetadata, Server) {
  const std::string body = encodeServerMetadata("infergate", "0.1.0");
  EXPECT_EQ(body, R"({"name":"infergate","version":"0.1.0",)"
                  R"("extensions":["binary_tensor_data","parameters","schedule_policy"]})");
  simdjson::dom::parser p;
  simdjson::dom::element root;
  ASSERT_FALSE(p.parse(body).get(root));
  simdjson::dom::array ext;
  ASSERT_FALSE(root["extensions"].get(ext));
  EXPECT_EQ(ext.size(), 3u);
}

// One copy: with a placer, the decoder writes into the slots it is given and nowhere else.
TEST(KServeJsonOneCopy, BinaryAndJsonInputsAreWrittenIntoPlacedSlots) {
  ModelConfig m;
  m.name = "m";
  m.inputs = {{"A", DataType::kFp32, {2}}, {"B", DataType::kInt32, {3}}};
  std::vector<uint8_t> arena(64, 0xEE);
  std::vector<size_t> sizes;
  backends::InputPlacer place = [&](InferRequest& r) {
    size_t off = 0;
    for (Tensor& t : r.inputs) {
      sizes.push_back(t.slot_bytes);
      t.slot = arena.data() + off;
      off += t.slot_bytes;
    }
    return true;
  };
  const float a[2] = {1.5f, -2.0f};
  const std::string header =
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},)"
      R"({"name":"B","datatype":"INT32","shape":[3],"data":[7,-8,9]}]})";
  std::string body = header;
  body.append(reinterpret_cast<const char*>(a), 8);
  absl::StatusOr<InferRequest> r = decodeInferRequest(body, header.size(), m, "m", "1", &place);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(sizes, (std::vector<size_t>{8, 12}));
  ASSERT_EQ(r->inputs.size(), 2u);
  EXPECT_TRUE(r->inputs[0].data.empty());
  EXPECT_TRUE(r->inputs[1].data.empty());
  EXPECT_EQ(r->inputs[0].slot, arena.data());
  EXPECT_EQ(r->inputs[0].byteSize(), 8u);
  EXPECT_EQ(std::memcmp(arena.data(), a, 8), 0);  // the binary part, one memcpy
  int32_t b[3];
  std::memcpy(b, arena.data() + 8, 12);           // JSON parsed into the typed slot
  EXPECT_EQ(b[0], 7);
  EXPECT_EQ(b[1], -8);
  EXPECT_EQ(b[2], 9);
  EXPECT_EQ(arena[20], 0xEE);                     // nothing written past the slots

  // Without a placement the same bytes land in Tensor::data.
  backends::InputPlacer refuse = [](InferRequest&) { return false; };
  absl::StatusOr<InferRequest> h = decodeInferRequest(body, header.size(), m, "m", "1", &refuse);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->inputs[0].slot, nullptr);
  ASSERT_EQ(h->inputs[1].data.size(), 12u);
  EXPECT_EQ(std::memcmp(h->inputs[1].data.data(), arena.data() + 8, 12), 0);
}

TEST(KServeJsonOneCopy, RawBinaryBodyAndBytesJsonArePlaced) {
  ModelConfig m;
  m.name = "m";
  m.max_batch_size = 4;
  m.inputs = {{"S", DataType::kBytes, {2}}};
  std::vector<uint8_t> arena(64, 0);
  backends::InputPlacer place = [&](InferRequest& r) {
    r.inputs[0].slot = arena.data();
    return true;
  };
  const std::string json =
      R"({"inputs":[{"name":"S","datatype":"BYTES","shape":[1,2],"data":["ab","c"]}]})";
  absl::StatusOr<InferRequest> r = decodeInferRequest(json, std::nullopt, m, "m", "1", &place);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].slot_bytes, 4u + 2 + 4 + 1);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(arena.data()), 11),
            std::string("\x02\0\0\0ab\x01\0\0\0c", 11));
  absl::StatusOr<InferRequest> bad = decodeInferRequest(
      R"({"inputs":[{"name":"S","datatype":"BYTES","shape":[1,2],"data":["ab",3]}]})",
      std::nullopt, m, "m", "1", &place);
  EXPECT_FALSE(bad.ok());  // refused in the header pass: nothing placed
}

}  // namespace
}  // namespace infergate::frontend
