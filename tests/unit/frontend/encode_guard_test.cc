// No exception leaves a completion callback (frontend/encode_guard.h): an answer that cannot
// be encoded becomes each API's error answer and the process goes on. Each case runs in a
// child process (a death test) whose address space is capped a few MiB above what it uses, so
// encoding the model's 16 MiB answer really runs out of memory: KServe REST (JSON), TF Serving
// REST, gRPC ModelInfer, ModelStreamInfer and Predict. Without the guard the bad_alloc leaves
// the callback and the child does not exit 0.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "backends/model.h"
#include "frontend/grpc_inference_service.h"
#include "frontend/kserve_rest.h"
#include "frontend/tfserving_rest.h"
#include "grpc_service.pb.h"
#include "tests/mocks/grpc_call.h"
#include "tf_predict.pb.h"

namespace infergate::frontend {
namespace {

constexpr int64_t kElements = 4 << 20;  // a 16 MiB INT32 answer

// Model "m": INT32 IN [1] -> OUT [kElements], unbatched; answers at once with the answer given.
class BigAnswerModel : public backends::Model {
 public:
  BigAnswerModel() {
    cfg_.name = "m";
    cfg_.version = "1";
    cfg_.max_batch_size = 0;
    cfg_.inputs = {{"IN", backends::DataType::kInt32, {1}}};
    cfg_.outputs = {{"OUT", backends::DataType::kInt32, {kElements}}};
    answer_.model_name = "m";
    backends::Tensor t;
    t.name = "OUT";
    t.dtype = backends::DataType::kInt32;
    t.shape = {kElements};
    t.data.assign(kElements * 4, 0x7f);  // 2139062143: ten digits each in JSON
    answer_.outputs.push_back(std::move(t));
  }
  const backends::ModelConfig& config() const override { return cfg_; }
  bool ready() const override { return true; }
  void infer(backends::InferRequest, backends::InferCallback done) override {
    done(std::move(answer_));
  }

 private:
  backends::ModelConfig cfg_;
  backends::InferResponse answer_;
};

// From here on, this process may map only `headroom` bytes more than it has now.
void capAddressSpace(size_t headroom) {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  ASSERT_TRUE(f != nullptr && std::fscanf(f, "%lu", &pages) == 1);
  std::fclose(f);
  const rlim_t cap = pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom;
  rlimit r{cap, cap};
  ASSERT_EQ(setrlimit(RLIMIT_AS, &r), 0);
}

// Runs `answer` (returns the answer's status, HTTP or gRPC code) with the address space capped;
// exits 0 when it is `want`.
void expectAnswerUnderCap(const std::function<int()>& answer, int want) {
  capAddressSpace(8 << 20);
  const int got = answer();
  std::_Exit(got == want ? 0 : 10 + got % 100);
}

// AddressSanitizer maps its own allocator regions and aborts when a capped address space
// refuses one (instead of a bad_alloc): these tests need the plain allocator.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

class EncodeGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kSanitized) {
      GTEST_SKIP() << "AddressSanitizer: a capped address space aborts in its allocator";
    }
    registry_.add(std::make_unique<BigAnswerModel>());
  }
  backends::ModelRegistry registry_;
};

TEST_F(EncodeGuardTest, KServeRestAnswersInsteadOfDying) {
  KServeRestHandler handler(registry_, ServerInfo{}, nullptr);
  auto answer = [&] {
    HttpRequest r;
    r.method = "POST";
    r.target = "/v2/models/m/infer";
    r.body = R"({"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[7]}]})";
    int status = 0;
    handler.handle(std::move(r), [&](HttpResponse resp) { status = resp.status; });
    return status;
  };
  EXPECT_EXIT(expectAnswerUnderCap(answer, 500), ::testing::ExitedWithCode(0), "");
}

TEST_F(EncodeGuardTest, TfServingRestAnswersInsteadOfDying) {
  TfServingRestHandler handler(registry_, nullptr);
  auto answer = [&] {
    HttpRequest r;
    r.method = "POST";
    r.target = "/v1/models/m:predict";
    r.body = R"({"inputs":[7]})";
    int status = 0;
    handler.handle(
        std::move(r), [&](HttpResponse resp) { status = resp.status; }, nullptr);
    return status;
  };
  EXPECT_EXIT(expectAnswerUnderCap(answer, 500), ::testing::ExitedWithCode(0), "");
}

TEST_F(EncodeGuardTest, GrpcModelInferAndStreamAndPredictAnswerInsteadOfDying) {
  InferenceGrpcServices services(registry_, ServerInfo{}, nullptr);
  inference::ModelInferRequest infer;
  infer.set_model_name("m");
  auto* in = infer.add_inputs();
  in->set_name("IN");
  in->set_datatype("INT32");
  in->add_shape(1);
  const int32_t v = 7;
  infer.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&v), 4));
  const std::string infer_bytes = infer.SerializeAsString();
  tensorflow::serving::PredictRequest predict;
  predict.mutable_model_spec()->set_name("m");
  tensorflow::TensorProto& t = (*predict.mutable_inputs())["IN"];
  t.set_dtype(tensorflow::DT_INT32);
  t.mutable_tensor_shape()->add_dim()->set_size(1);
  t.add_int_val(7);
  const std::string predict_bytes = predict.SerializeAsString();

  auto call = [&](const char* path, const std::string& bytes) {
    GrpcCall c;
    return mocks::callAndWait(services, path, c, bytes);
  };
  const int internal = static_cast<int>(absl::StatusCode::kInternal);
  EXPECT_EXIT(expectAnswerUnderCap(
                  [&] {
                    return static_cast<int>(
                        call("/inference.GRPCInferenceService/ModelInfer", infer_bytes).code);
                  },
                  internal),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(expectAnswerUnderCap(
                  [&] {
                    return static_cast<int>(
                        call("/tensorflow.serving.PredictionService/Predict", predict_bytes)
                            .code);
                  },
                  internal),
              ::testing::ExitedWithCode(0), "");
  // In a stream the failed request is that message's error_message; the reply itself is OK.
  EXPECT_EXIT(expectAnswerUnderCap(
                  [&] {
                    GrpcReply r =
                        call("/inference.GRPCInferenceService/ModelStreamInfer", infer_bytes);
                    return r.code == absl::StatusCode::kOk &&
                                   r.framed.find("too large to encode") != std::string::npos
                               ? 1
                               : 2;
                  },
                  1),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace infergate::frontend
