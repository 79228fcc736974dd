#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>

#include "backends/identity_model.h"
#include "backends/model.h"

namespace infergate::backends {
namespace {

ModelConfig identityConfig(int max_batch = 8) {
  ModelConfig c;
  c.name = "identity";
  c.version = "1";
  c.max_batch_size = max_batch;
  c.inputs = {{"INPUT0", DataType::kFp32, {16}}, {"INPUT1", DataType::kBytes, {-1}}};
  c.outputs = {{"OUTPUT0", DataType::kFp32, {16}}, {"OUTPUT1", DataType::kBytes, {-1}}};
  return c;
}

Tensor fp32(const std::string& name, std::vector<int64_t> shape, size_t n) {
  Tensor t{name, DataType::kFp32, std::move(shape), {}};
  t.data.resize(n * 4);
  for (size_t i = 0; i < n; ++i) {
    float f = static_cast<float>(i);
    std::memcpy(t.data.data() + 4 * i, &f, 4);
  }
  return t;
}

Tensor bytesTensor(const std::string& name, const std::vector<std::string>& items) {
  Tensor t{name, DataType::kBytes, {1, static_cast<int64_t>(items.size())}, {}};
  for (const std::string& s : items) {
    uint32_t len = s.size();
    t.data.insert(t.data.end(), reinterpret_cast<uint8_t*>(&len), reinterpret_cast<uint8_t*>(&len) + 4);
    t.data.insert(t.data.end(), s.begin(), s.end());
  }
  return t;
}

InferRequest goodRequest() {
  InferRequest r;
  r.model_name = "identity";
  r.inputs.push_back(fp32("INPUT0", {1, 16}, 16));
  r.inputs.push_back(bytesTensor("INPUT1", {"a", "bc"}));
  return r;
}

TEST(DataType, NamesRoundTripAndSizes) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    EXPECT_EQ(parseDataType(dataTypeName(t)), t);
  }
  EXPECT_EQ(parseDataType("fp32"), std::nullopt);
  EXPECT_EQ(parseDataType("STRING"), std::nullopt);
  EXPECT_EQ(dataTypeSize(DataType::kFp16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kBf16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::kBytes), 0u);
}

// Issue 14: the one DataType visitor. Every name and size as the protocol defines it, and each
// datatype visited as itself with its storage type.
TEST(DataType, VisitorTraitsMatchTheProtocol) {
  const std::pair<std::string_view, size_t> expected[kNumDataTypes] = {
      {"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8},
      {"INT8", 1}, {"INT16", 2}, {"INT32", 4}, {"INT64", 8}, {"FP16", 2},
      {"BF16", 2}, {"FP32", 4}, {"FP64", 8}, {"BYTES", 0},
  };
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    EXPECT_EQ(dataTypeName(t), expected[i].first);
    EXPECT_EQ(dataTypeSize(t), expected[i].second);
    visitDataType(t, [&](auto tag) {
      EXPECT_EQ(tag.value, t);
      EXPECT_EQ(tag.kName, expected[i].first);
      if constexpr (!tag.kIsBytes) {
        EXPECT_EQ(sizeof(typename decltype(tag)::Storage), expected[i].second);
      }
    });
  }
  static_assert(std::is_same_v<DataTypeTag<DataType::kFp16>::Storage, uint16_t>);
  static_assert(std::is_same_v<DataTypeTag<DataType::kInt8>::Storage, int8_t>);
  static_assert(std::is_same_v<DataTypeTag<DataType::kFp64>::Storage, double>);
  static_assert(DataTypeTag<DataType::kBool>::kIsBool && DataTypeTag<DataType::kBf16>::kIsFloat &&
                DataTypeTag<DataType::kUint64>::kIsInteger && DataTypeTag<DataType::kBytes>::kIsBytes);
}

TEST(ElementCount, OverflowAndNegative) {
  EXPECT_EQ(elementCount({2, 3, 4}), 24u);
  EXPECT_EQ(elementCount({}), 1u);
  EXPECT_EQ(elementCount({0, 5}), 0u);
  EXPECT_EQ(elementCount({-1, 5}), std::nullopt);
  EXPECT_EQ(elementCount({1ll << 40, 1ll << 40}), std::nullopt);
}

TEST(TensorByteSize, CheckedProduct) {
  EXPECT_EQ(tensorByteSize({2, 16}, DataType::kFp32), 128u);
  EXPECT_EQ(tensorByteSize({2, 16}, DataType::kBytes), std::nullopt);
  EXPECT_EQ(tensorByteSize({(1ll << 61) + 1}, DataType::kFp64), std::nullopt);  // 8x wraps
  EXPECT_EQ(tensorByteSize({-1}, DataType::kFp32), std::nullopt);
}

// Issue 13: with a variable dimension the element count is the client's; count x element size
// wrapped, so a tensor claiming 2^61 + 1 FP64 elements with 8 bytes of data passed validation.
TEST(ValidateRequest, ByteSizeOverflowIsRejected) {
  ModelConfig c;
  c.name = "var";
  c.max_batch_size = 0;
  c.inputs = {{"X", DataType::kFp64, {-1}}};
  c.outputs = {{"Y", DataType::kFp64, {-1}}};
  InferRequest r;
  r.model_name = "var";
  Tensor t{"X", DataType::kFp64, {(1ll << 61) + 1}, {}};
  t.data.resize(8);
  r.inputs.push_back(t);
  const absl::Status st = validateRequest(c, r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

TEST(ModelConfig, FullShapeAddsBatchDim) {
  ModelConfig c = identityConfig(8);
  EXPECT_EQ(c.fullShape(c.inputs[0]), (std::vector<int64_t>{-1, 16}));
  c.max_batch_size = 0;
  EXPECT_EQ(c.fullShape(c.inputs[0]), (std::vector<int64_t>{16}));
}

TEST(ValidateRequest, AcceptsGood) {
  EXPECT_TRUE(validateRequest(identityConfig(), goodRequest()).ok());
}

struct BadCase {
  const char* what;
  std::function<void(InferRequest&)> mutate;
  const char* fragment;
};

TEST(ValidateRequest, RejectsBadWithReason) {
  const std::vector<BadCase> cases = {
      {"missing input", [](InferRequest& r) { r.inputs.pop_back(); },
       "'INPUT1' for model 'identity' is missing"},
      {"duplicate", [](InferRequest& r) { r.inputs.push_back(r.inputs[0]); }, "more than once"},
      {"unexpected", [](InferRequest& r) { r.inputs.push_back(fp32("X", {1}, 1)); },
       "unexpected input 'X'"},
      {"dtype", [](InferRequest& r) { r.inputs[0].dtype = DataType::kInt32; },
       "INPUT0' has datatype INT32"},
      {"rank", [](InferRequest& r) { r.inputs[0].shape = {16}; }, "expects [-1,16]"},
      {"dim",
       [](InferRequest& r) {
         r.inputs[0].shape = {1, 15};
       },
       "has shape [1,15]"},
      {"negative",
       [](InferRequest& r) {
         r.inputs[0].shape = {-1, 16};
       },
       "has shape [-1,16]"},
      {"batch too big",
       [](InferRequest& r) {
         r.inputs[0] = fp32("INPUT0", {9, 16}, 144);
       },
       "allows at most 8"},
      {"batch mismatch",
       [](InferRequest& r) {
         r.inputs[0] = fp32("INPUT0", {2, 16}, 32);
       },
       "other inputs have batch size"},
      {"size", [](InferRequest& r) { r.inputs[0].data.pop_back(); }, "63 bytes of data"},
      {"bytes layout", [](InferRequest& r) { r.inputs[1].data.push_back(0); }, "length-prefixed"},
      {"bytes truncated", [](InferRequest& r) { r.inputs[1].data.resize(6); }, "length-prefixed"},
      {"output",
       [](InferRequest& r) {
         r.outputs.push_back({"NOPE", false});
       },
       "unexpected inference output 'NOPE'"},
      {"output twice",
       [](InferRequest& r) {
         r.outputs.assign(2, {"OUTPUT0", false});
       },
       "output 'OUTPUT0' is requested more than once"},
  };
  for (const BadCase& c : cases) {
    InferRequest r = goodRequest();
    c.mutate(r);
    const absl::Status st = validateRequest(identityConfig(), r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(std::string(st.message()).find(c.fragment), std::string::npos)
        << c.what << ": " << st.message();
  }
}

// The checks are linear in what the client lists: 200,000 distinct undeclared inputs, or as
// many repetitions of an output, are refused in well under a second (the pairwise duplicate
// check took minutes for this many).
TEST(ValidateRequest, ManyInputsOrOutputsAreRefusedInLinearTime) {
  constexpr int kMany = 200000;
  InferRequest r = goodRequest();
  for (int i = 0; i < kMany; ++i) r.inputs.push_back(fp32("X" + std::to_string(i), {1}, 1));
  auto t0 = std::chrono::steady_clock::now();
  absl::Status st = validateRequest(identityConfig(), r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_NE(std::string(st.message()).find("unexpected input 'X0'"), std::string::npos) << st;
  r = goodRequest();
  r.outputs.assign(kMany, {"OUTPUT0", false});
  t0 = std::chrono::steady_clock::now();
  st = validateRequest(identityConfig(), r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_NE(std::string(st.message()).find("more than once"), std::string::npos) << st;
}

TEST(ModelRegistry, FindsByNameAndVersion) {
  ModelRegistry reg;
  ModelConfig a = identityConfig();
  ModelConfig b = identityConfig();
  b.version = "2";
  ModelConfig c = identityConfig();
  c.name = "other";
  reg.add(std::make_unique<IdentityModel>(a));
  reg.add(std::make_unique<IdentityModel>(b));
  reg.add(std::make_unique<IdentityModel>(c));
  ASSERT_NE(reg.find("identity"), nullptr);
  EXPECT_EQ(reg.find("identity", "2")->config().version, "2");
  EXPECT_EQ(reg.find("identity", "1")->config().version, "1");
  EXPECT_EQ(reg.find("identity", "3"), nullptr);
  EXPECT_EQ(reg.find("other")->config().name, "other");
  EXPECT_EQ(reg.find("missing"), nullptr);
  EXPECT_TRUE(reg.allReady());
}

TEST(IdentityModel, ReturnsInputsRenamedInline) {
  IdentityModel m(identityConfig());
  InferRequest req = goodRequest();
  req.id = "abc";
  const std::vector<uint8_t> in0 = req.inputs[0].data;
  bool called = false;
  m.infer(std::move(req), [&](absl::StatusOr<InferResponse> r) {
    called = true;
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->id, "abc");
    ASSERT_EQ(r->outputs.size(), 2u);
    EXPECT_EQ(r->outputs[0].name, "OUTPUT0");
    EXPECT_EQ(r->outputs[0].data, in0);
    EXPECT_EQ(r->outputs[1].name, "OUTPUT1");
    EXPECT_EQ(r->outputs[1].shape, (std::vector<int64_t>{1, 2}));
  });
  EXPECT_TRUE(called);  // no cost model: completes inline
}

TEST(IdentityModel, CostModelTakesTimeAndKeepsOrder) {
  ModelConfig c = identityConfig();
  c.cost_fixed_us = 2000;
  c.cost_per_item_us = 1000;
  IdentityModel m(c);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> done;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    InferRequest r = goodRequest();
    r.id = std::to_string(i);
    m.infer(std::move(r), [&](absl::StatusOr<InferResponse> resp) {
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(resp->id);
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return done.size() == 3; }));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  // 3 calls x (2000 + 1000 x 1 item) us, run one after another.
  EXPECT_GE(elapsed, std::chrono::microseconds(9000));
  EXPECT_EQ(done, (std::vector<std::string>{"0", "1", "2"}));
}

TEST(CreateModel, UnknownBackend) {
  ModelConfig c = identityConfig();
  c.backend = "nope";
  auto m = createModel(c);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(m.status().message()).find("unknown backend 'nope'"), std::string::npos);
}

}  // namespace
}  // namespace infergate::backends
