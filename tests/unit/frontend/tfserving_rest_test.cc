#include "frontend/tfserving_rest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>

#include "backends/identity_model.h"
#include "common/metrics.h"
#include "frontend/http.h"
#include "tests/mocks/model_config.h"

namespace infergate::frontend {
namespace {

using backends::DataType;

backends::ModelConfig oneInput(DataType dt = DataType::kFp32, int max_batch = 8,
                               std::vector<int64_t> shape = {3}) {
  return mocks::modelConfig("m", "1", max_batch, {{"x", dt, shape}}, {{"y", dt, shape}});
}

backends::ModelConfig twoInputs() {
  return mocks::modelConfig("two", "2", 4,
                            {{"a", DataType::kInt32, {2}}, {"s", DataType::kBytes, {1}}},
                            {{"a_out", DataType::kInt32, {2}}, {"s_out", DataType::kBytes, {1}}});
}

std::vector<float> floats(const backends::Tensor& t) {
  std::vector<float> v(t.byteSize() / 4);
  std::memcpy(v.data(), t.bytes(), v.size() * 4);
  return v;
}

TEST(TfServingRest, RewriteNonFiniteOnlyOutsideStrings) {
  std::string out;
  EXPECT_FALSE(rewriteNonFiniteTokens(R"({"a":[1,2],"NaN":"Infinity"})", out));
  ASSERT_TRUE(rewriteNonFiniteTokens(R"({"x":[NaN,-Infinity,Infinity,"NaN",Inf]})", out));
  EXPECT_EQ(out,
            R"({"x":["\u0000NaN","\u0000-Inf","\u0000Inf","NaN","\u0000Inf"]})");
  // Not a token when glued to an identifier character.
  EXPECT_FALSE(rewriteNonFiniteTokens(R"({"x": NaNa})", out));
  // Escaped quote inside a string does not end it.
  EXPECT_FALSE(rewriteNonFiniteTokens(R"({"x":"a\"NaN"})", out));
}

// Issue 13, the REST twin of the 40-byte Predict crash: the shape is read off the first element
// at each depth, so 14 KB of JSON can claim 1000^7 elements. It is refused as an invalid shape
// (checked arithmetic in checkInputShape) before a value is written, in both formats.
TEST(TfServingRest, ShapeThatOverflowsIsRefusedBeforeWriting) {
  std::string v = "0";
  for (int depth = 0; depth < 7; ++depth) {
    std::string level = "[" + v;
    for (int i = 1; i < 1000; ++i) level += ",0";
    v = level + "]";
  }
  TfPredictFormat f;
  auto col = decodeTfPredictRequest(R"({"inputs":)" + v + "}",
                                    oneInput(DataType::kFp32, 0, std::vector<int64_t>(7, -1)), &f);
  ASSERT_FALSE(col.ok());
  EXPECT_EQ(col.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(col.status().message().find("invalid shape"), std::string::npos) << col.status();
  auto row = decodeTfPredictRequest(R"({"instances":)" + v + "}",
                                    oneInput(DataType::kFp32, 1000, std::vector<int64_t>(6, -1)), &f);
  ASSERT_FALSE(row.ok());
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(row.status().message().find("invalid shape"), std::string::npos) << row.status();
}

// A shape the model does not take is refused by the shape, not after decoding every value.
TEST(TfServingRest, ShapeCheckedAgainstTheModelFirst) {
  TfPredictFormat f;
  auto r = decodeTfPredictRequest(R"({"inputs":[[1,2,3,4],[5,6,7,8]]})", oneInput(), &f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has shape [2,4]"), std::string::npos) << r.status();
}

TEST(TfServingRest, RowFormatSingleInputWithNonFinite) {
  TfPredictFormat f;
  auto r = decodeTfPredictRequest(R"({"signature_name":"serving_default",
      "instances":[[1.5,NaN,-Infinity],[Infinity,-2,3]]})", oneInput(), &f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(f, TfPredictFormat::kRow);
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].name, "x");
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->protocol, net::Protocol::kHttpTfServing);
  std::vector<float> v = floats(r->inputs[0]);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_TRUE(std::isinf(v[2]) && v[2] < 0);
  EXPECT_TRUE(std::isinf(v[3]) && v[3] > 0);
  EXPECT_EQ(v[4], -2.0f);
}

TEST(TfServingRest, RowFormatNamedInputsInModelOrder) {
  TfPredictFormat f;
  auto r = decodeTfPredictRequest(
      R"({"instances":[{"s":["hi"],"a":[1,2]},{"a":[3,4],"s":[{"b64":"AAE="}]}]})", twoInputs(),
      &f);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->inputs.size(), 2u);
  EXPECT_EQ(r->inputs[0].name, "a");
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 2}));
  int32_t a[4];
  std::memcpy(a, r->inputs[0].bytes(), 16);
  EXPECT_EQ(a[3], 4);
  EXPECT_EQ(r->inputs[1].name, "s");
  const std::string expect("\x02\0\0\0hi\x02\0\0\0\x00\x01", 12);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->inputs[1].bytes()),
                        r->inputs[1].byteSize()),
            expect);
}

TEST(TfServingRest, ColumnarFormat) {
  TfPredictFormat f;
  auto r = decodeTfPredictRequest(R"({"inputs":[[1,2,3]]})", oneInput(), &f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(f, TfPredictFormat::kColumnar);
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{1, 3}));
  auto n = decodeTfPredictRequest(R"({"inputs":{"a":[[1,2]],"s":[["x"]]}})", twoInputs(), &f);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->inputs[1].shape, (std::vector<int64_t>{1, 1}));
}

TEST(TfServingRest, DecodeErrors) {
  TfPredictFormat f;
  struct Case {
    const char* body;
    const char* contains;
  } cases[] = {
      {R"({})", "Missing 'inputs' or 'instances' key"},
      {R"({"inputs":[1],"instances":[1]})", "only one of"},
      {R"({"instances":[[1,2,3],[1,2]]})", "same shape"},
      {R"({"instances":[]})", "No instances"},
      {R"({"inputs":[[1,2,3],[3]]})", "ragged"},
      {R"({"inputs":{"nope":[1]}})", "'nope' is not an input"},
      {R"({"inputs":[["a",1,2]]})", "expected a number"},
      {R"([1,2])", "Is not object"},
      {R"({"inputs": [1,)", "JSON Parse error"},
      {R"({"inputs":[[1e39,1,2]]})", "out of range"},
  };
  for (const Case& c : cases) {
    auto r = decodeTfPredictRequest(c.body, oneInput(), &f);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(std::string(r.status().message()).find(c.contains), std::string::npos)
        << c.body << " -> " << r.status();
  }
  auto i8 = decodeTfPredictRequest(R"({"inputs":[300]})", oneInput(DataType::kInt8), &f);
  ASSERT_FALSE(i8.ok());
  auto nan_int = decodeTfPredictRequest(R"({"inputs":[NaN]})", oneInput(DataType::kInt32), &f);
  ASSERT_FALSE(nan_int.ok());
  auto multi = decodeTfPredictRequest(R"({"instances":[[1,2]]})", twoInputs(), &f);
  ASSERT_FALSE(multi.ok());
}

backends::InferResponse responseOf(std::vector<backends::Tensor> outs) {
  backends::InferResponse r;
  r.outputs = std::move(outs);
  return r;
}

backends::Tensor fp32(std::string name, std::vector<int64_t> shape, std::vector<float> v) {
  backends::Tensor t;
  t.name = std::move(name);
  t.dtype = DataType::kFp32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

TEST(TfServingRest, EncodeRowAndColumnar) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  auto one = responseOf({fp32("y", {2, 2}, {1.5f, nan, -inf, 0.1f})});
  auto row = encodeTfPredictResponse(one, TfPredictFormat::kRow);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(*row, R"({"predictions":[[1.5,NaN],[-Infinity,0.1]]})");
  auto col = encodeTfPredictResponse(one, TfPredictFormat::kColumnar);
  ASSERT_TRUE(col.ok());
  EXPECT_EQ(*col, R"({"outputs":[[1.5,NaN],[-Infinity,0.1]]})");

  backends::Tensor s;
  s.name = "s";
  s.dtype = DataType::kBytes;
  s.shape = {2};
  const std::string bytes("\x02\0\0\0ok\x01\0\0\0\xff", 11);
  s.data.assign(bytes.begin(), bytes.end());
  auto two = responseOf({fp32("y", {2}, {1, 2}), s});
  auto row2 = encodeTfPredictResponse(two, TfPredictFormat::kRow);
  ASSERT_TRUE(row2.ok());
  EXPECT_EQ(*row2, R"({"predictions":[{"y":1,"s":"ok"},{"y":2,"s":{"b64":"/w=="}}]})");
  auto col2 = encodeTfPredictResponse(two, TfPredictFormat::kColumnar);
  ASSERT_TRUE(col2.ok());
  EXPECT_EQ(*col2, R"({"outputs":{"y":[1,2],"s":["ok",{"b64":"/w=="}]}})");

  auto scalar = responseOf({fp32("y", {}, {3})});
  EXPECT_FALSE(encodeTfPredictResponse(scalar, TfPredictFormat::kRow).ok());
  EXPECT_EQ(*encodeTfPredictResponse(scalar, TfPredictFormat::kColumnar), R"({"outputs":3})");
  auto truncated = responseOf({fp32("y", {3}, {1, 2})});
  EXPECT_EQ(encodeTfPredictResponse(truncated, TfPredictFormat::kColumnar).status().code(),
            absl::StatusCode::kInternal);
}

class HandlerTest : public ::testing::Test {
 protected:
  HandlerTest() {
    registry_.add(std::make_unique<backends::IdentityModel>(oneInput()));
  }
  HttpResponse call(std::string method, std::string target, std::string body = "") {
    HttpRequest req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.body = std::move(body);
    std::promise<HttpResponse> p;
    auto fut = p.get_future();
    TfServingRestHandler h(registry_, nullptr);
    h.handle(std::move(req), [&p](HttpResponse r) { p.set_value(std::move(r)); }, nullptr);
    EXPECT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    return fut.get();
  }
  backends::ModelRegistry registry_;
};

TEST_F(HandlerTest, PredictAndStatus) {
  HttpResponse r = call("POST", "/v1/models/m:predict", R"({"instances":[[1,2,NaN]]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"predictions":[[1,2,NaN]]})");
  r = call("POST", "/v1/models/m/versions/1:predict", R"({"inputs":[[1,2,3],[4,5,6]]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outputs":[[1,2,3],[4,5,6]]})");
  r = call("GET", "/v1/models/m");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"model_version_status":[{"version":"1","state":"AVAILABLE","status":{"error_code":"OK","error_message":""}}]})");
  r = call("GET", "/v1/models/m/versions/1");
  EXPECT_EQ(r.status, 200);
}

TEST_F(HandlerTest, Errors) {
  HttpResponse r = call("POST", "/v1/models/nope:predict", R"({"instances":[[1,2,3]]})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"j({"error":"Servable not found for request: Latest(nope)"})j");
  r = call("POST", "/v1/models/m/versions/7:predict", R"({"instances":[[1,2,3]]})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"j({"error":"Servable not found for request: Specific(m, 7)"})j");
  r = call("GET", "/v1/models/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"({"error":"Could not find any versions of model nope"})");
  r = call("GET", "/v1/models/m:predict");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":"Malformed request: GET /v1/models/m:predict"})");
  r = call("POST", "/v1/models/m/versions/x:predict", "{}");
  EXPECT_EQ(r.status, 400);
  r = call("POST", "/v1/models/m:classify", "{}");
  EXPECT_EQ(r.status, 501);
  r = call("POST", "/v1/models/m:predict", R"({"instances":[[1,2]]})");  // wrong dim
  EXPECT_EQ(r.status, 400);
  r = call("POST", "/v1/models/m:predict",
           R"({"instances":[[1,2,3],[1,2,3],[1,2,3],[1,2,3],[1,2,3],[1,2,3],[1,2,3],[1,2,3],[1,2,3]]})");
  EXPECT_EQ(r.status, 400);  // over max_batch_size 8
}

// Issue 16, one copy: with a placer every input's elements are written once, straight from the
// parsed document into the slot it was given; the bytes are the unplaced decode's.
TEST(TfServingRestOneCopy, BothFormatsWriteIntoPlacedSlots) {
  const backends::ModelConfig two = twoInputs();
  const std::vector<std::string> bodies = {
      R"({"instances":[{"a":[1,-2],"s":["xy"]},{"a":[3,4],"s":[{"b64":"/w=="}]}]})",
      R"({"inputs":{"s":[["p"],["qr"]],"a":[[5,6],[7,-8]]}})",
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    TfPredictFormat f;
    auto heap = decodeTfPredictRequest(body, two, &f);
    ASSERT_TRUE(heap.ok()) << heap.status();
    std::vector<uint8_t> arena(128, 0xEE);
    std::vector<size_t> offsets;
    const backends::InputPlacer place = [&](backends::InferRequest& r) {
      size_t off = 4;
      for (backends::Tensor& t : r.inputs) {
        EXPECT_TRUE(t.data.empty());
        offsets.push_back(off);
        t.slot = arena.data() + off;
        off += t.slot_bytes + 4;
      }
      return true;
    };
    auto placed = decodeTfPredictRequest(body, two, &f, &place);
    ASSERT_TRUE(placed.ok()) << placed.status();
    ASSERT_EQ(offsets.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const backends::Tensor& t = placed->inputs[i];
      EXPECT_TRUE(t.data.empty());
      EXPECT_EQ(t.slot, arena.data() + offsets[i]);
      EXPECT_EQ(std::vector<uint8_t>(t.bytes(), t.bytes() + t.byteSize()), heap->inputs[i].data);
      EXPECT_EQ(t.shape, heap->inputs[i].shape);
    }
    EXPECT_EQ(placed->inputs[0].slot_bytes, 16u);  // INT32 [2,2]
    // Nothing written between or after the slots.
    for (size_t k : {size_t{0}, offsets[1] - 1, offsets[1] + placed->inputs[1].slot_bytes}) {
      EXPECT_EQ(arena[k], 0xEE) << k;
    }
  }
}

TEST(TfServingRestOneCopy, BadValuesAreRefusedBeforePlacement) {
  bool placed = false;
  const backends::InputPlacer place = [&](backends::InferRequest&) {
    placed = true;
    return false;
  };
  TfPredictFormat f;
  for (const char* body : {R"({"instances":[{"a":[1,2],"s":"x"},{"a":[3,"4"],"s":"y"}]})",
                           R"({"inputs":{"a":[[1,2]],"s":[[1]]}})",
                           R"({"inputs":{"a":[[1,2]],"s":[[{"b64":"!!"}]]}})",
                           R"({"inputs":{"a":[[1,2],[3]],"s":[["a"],["b"]]}})",
                           R"({"inputs":{"a":[[1,2]],"a":[[1,2]],"s":[["a"]]}})"}) {
    EXPECT_FALSE(decodeTfPredictRequest(body, twoInputs(), &f, &place).ok()) << body;
  }
  EXPECT_FALSE(placed);
}

// A model that refuses admission and counts what reached it.
class RefusingModel : public backends::Model {
 public:
  RefusingModel() : config_(oneInput()) {}
  const backends::ModelConfig& config() const override { return config_; }
  bool ready() const override { return true; }
  void infer(backends::InferRequest, backends::InferCallback done) override {
    ++infers;
    done(absl::InternalError("reached"));
  }
  bool placeInputs(backends::InferRequest&) override {
    ++placements;
    return false;
  }
  absl::Status admission(int64_t priority) override {
    ++admissions;
    last_priority = priority;
    return refuse ? absl::UnavailableError("queue full") : absl::OkStatus();
  }
  backends::ModelConfig config_;
  bool refuse = true;
  int admissions = 0, placements = 0, infers = 0;
  int64_t last_priority = -1;
};

TEST(TfServingRestOneCopy, AdmissionRefusesBeforeTheBodyIsDecoded) {
  backends::ModelRegistry registry;
  auto owned = std::make_unique<RefusingModel>();
  RefusingModel* model = owned.get();
  registry.add(std::move(owned));
  auto call = [&](std::string body) {
    HttpRequest req;
    req.method = "POST";
    req.target = "/v1/models/m:predict";
    req.body = std::move(body);
    HttpResponse out;
    TfServingRestHandler h(registry, nullptr);
    h.handle(std::move(req), [&out](HttpResponse r) { out = std::move(r); }, nullptr);
    return out;
  };
  HttpResponse r = call(R"({"instances":[[1,2,3]]})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, R"({"error":"queue full"})");
  r = call("{not json");  // not even parsed
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(model->admissions, 2);
  EXPECT_EQ(model->last_priority, 0);
  EXPECT_EQ(model->placements, 0);
  EXPECT_EQ(model->infers, 0);
  model->refuse = false;  // admitted: decoded, offered for placement, run
  r = call(R"({"instances":[[1,2,3]]})");
  EXPECT_EQ(model->placements, 1);
  EXPECT_EQ(model->infers, 1);
}

}  // namespace
}  // namespace infergate::frontend
