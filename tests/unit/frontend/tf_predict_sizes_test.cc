// Issue 13: sizes a TF Serving Predict request declares are checked against the model before
// memory is touched. The 40-byte request of the issue (one dimension of 4611686018427387905 and
// a single value to broadcast) wrapped count * 4 to 4 and wrote far past the buffer.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/model.h"
#include "frontend/grpc_inference_service.h"
#include "tests/mocks/grpc_call.h"
#include "tests/unit/frontend/recording_model.h"
#include "tf_predict.pb.h"

namespace infergate::frontend {
namespace {

class TfPredictSizes : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = testing::recordingModel(&levels_, 1);  // "m": INT32 IN [-1, 1], max batch 8
    ASSERT_TRUE(m.ok()) << m.status();
    registry_.add(std::move(*m));
    services_ = std::make_unique<InferenceGrpcServices>(registry_, ServerInfo{}, nullptr);
  }
  GrpcReply predict(const std::vector<int64_t>& dims, const std::vector<int32_t>& values) {
    tensorflow::serving::PredictRequest pr;
    pr.mutable_model_spec()->set_name("m");
    tensorflow::TensorProto& t = (*pr.mutable_inputs())["IN"];
    t.set_dtype(tensorflow::DT_INT32);
    for (int64_t d : dims) t.mutable_tensor_shape()->add_dim()->set_size(d);
    for (int32_t v : values) t.add_int_val(v);
    GrpcCall call;
    return mocks::callAndWait(*services_, "/tensorflow.serving.PredictionService/Predict", call,
                              pr.SerializeAsString());
  }
  std::vector<uint32_t> levels_;
  backends::ModelRegistry registry_;
  std::unique_ptr<InferenceGrpcServices> services_;
};

TEST_F(TfPredictSizes, HugeDimensionWithOneValueIsInvalidArgument) {
  const GrpcReply r = predict({4611686018427387905LL}, {1});
  EXPECT_EQ(r.code, absl::StatusCode::kInvalidArgument) << r.message;
  EXPECT_NE(r.message.find("shape"), std::string::npos) << r.message;
  EXPECT_TRUE(levels_.empty());  // nothing reached the model
}

TEST_F(TfPredictSizes, OversizedShapesAreRefusedBeforeDecoding) {
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{
           {4611686018427387905LL, 1}, {1LL << 40, 1}, {9, 1}, {1, 1LL << 62}, {-1, 1}, {2, 1, 1}}) {
    const GrpcReply r = predict(dims, {1});
    EXPECT_EQ(r.code, absl::StatusCode::kInvalidArgument) << backends::shapeToString(dims);
  }
  EXPECT_TRUE(levels_.empty());
}

TEST_F(TfPredictSizes, OneValueStillBroadcastsOverAValidShape) {
  const GrpcReply r = predict({8, 1}, {7});
  EXPECT_EQ(r.code, absl::StatusCode::kInternal) << r.message;  // the recording backend's answer
  EXPECT_EQ(levels_.size(), 1u);
}

}  // namespace
}  // namespace infergate::frontend
