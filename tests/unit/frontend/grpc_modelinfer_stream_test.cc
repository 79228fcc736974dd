// ModelInfer through Http2Session + InferenceGrpcServices with the streaming sink (issue 16):
// raw_input_contents written from the DATA chunks straight into the model's slots at every
// DATA split, counted exactly (InferRequest::received_copy_bytes from the transport's copy
// flag, Http2SessionStats::gathered_bytes 0); admission refusal before any placement or copy,
// answered with the model's code while the connection keeps serving; reordered fields through
// the counted fallback.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/model.h"
#include "frontend/grpc_framing.h"
#include "frontend/grpc_inference_service.h"
#include "frontend/http2_session.h"
#include "grpc_service.pb.h"
#include "tests/mocks/fake_transport.h"
#include "tests/unit/frontend/h2_frames.h"

namespace infergate::frontend {
namespace {

using testing::frame;
using testing::literal;

struct CopyingTransport : mocks::FakeTransport {
  bool copying = false;
  bool deliveringCopy() const override { return copying; }
};

// Model "m": A FP32 [3], B UINT8 [5]; places into an arena; admission as told; answers with
// no outputs after recording the request.
class SlotModel : public backends::Model {
 public:
  SlotModel() {
    cfg_.name = "m";
    cfg_.version = "1";
    cfg_.inputs = {{"A", backends::DataType::kFp32, {3}}, {"B", backends::DataType::kUint8, {5}}};
    cfg_.outputs = {{"OUT", backends::DataType::kFp32, {3}}};
  }
  const backends::ModelConfig& config() const override { return cfg_; }
  bool ready() const override { return true; }
  void infer(backends::InferRequest request, backends::InferCallback done) override {
    seen.push_back(std::move(request));
    backends::InferResponse r;
    r.model_name = "m";
    done(std::move(r));
  }
  bool placeInputs(backends::InferRequest& r) override {
    ++placements;
    size_t at = 0;
    for (auto& t : r.inputs) {
      t.slot = arena.data() + at;
      at += t.slot_bytes;
    }
    return true;
  }
  absl::Status admission(int64_t) override {
    ++admissions;
    return admit;
  }

  backends::ModelConfig cfg_;
  std::vector<backends::InferRequest> seen;
  std::vector<uint8_t> arena = std::vector<uint8_t>(64, 0xEE);
  int placements = 0, admissions = 0;
  absl::Status admit = absl::OkStatus();
};

std::string headers() {
  return literal(":method", "POST") + literal(":scheme", "http") +
         literal(":path", "/inference.GRPCInferenceService/ModelInfer") +
         literal(":authority", "x") + literal("content-type", "application/grpc") +
         literal("te", "trailers");
}

const std::string kA = [] {
  std::string s(12, '\0');
  const float v[3] = {1.5f, -2.f, 3.25f};
  std::memcpy(s.data(), v, 12);
  return s;
}();
const std::string kB = "\x01\x02\x03\x04\x05";

inference::ModelInferRequest request() {
  inference::ModelInferRequest m;
  m.set_model_name("m");
  auto* a = m.add_inputs();
  a->set_name("A");
  a->set_datatype("FP32");
  a->add_shape(3);
  auto* b = m.add_inputs();
  b->set_name("B");
  b->set_datatype("UINT8");
  b->add_shape(5);
  m.add_raw_input_contents(kA);
  m.add_raw_input_contents(kB);
  return m;
}

struct ModelInferSession : ::testing::Test {
  ModelInferSession() {
    auto m = std::make_unique<SlotModel>();
    model = m.get();
    registry.add(std::move(m));
    services = std::make_unique<InferenceGrpcServices>(registry, ServerInfo{}, nullptr);
    session = std::make_shared<Http2Session>(transport, *services, options, nullptr);
    const std::string preface =
        std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + frame(4, 0, 0, "");
    session->onData(preface.data(), preface.size());
    lastStatus();
  }
  void feed(const std::string& s) { session->onData(s.data(), s.size()); }
  // The message of `wire` on stream `id`, its DATA frames cut at `cuts`.
  std::string call(uint32_t id, const std::string& wire, const std::vector<size_t>& cuts) {
    std::string body;
    appendGrpcMessage(body, wire);
    std::string out = frame(1, 4, id, headers());
    size_t at = 0;
    std::vector<size_t> ends = cuts;
    ends.push_back(body.size());
    for (size_t i = 0; i < ends.size(); ++i) {
      const size_t e = std::max(at, std::min(ends[i], body.size()));
      out += frame(0, i + 1 == ends.size() ? 1 : 0, id, body.substr(at, e - at));
      at = e;
    }
    return out;
  }
  // The last grpc-status sent so far (HPACK-decoded; what was sent is consumed).
  std::string lastStatus() {
    std::string status;
    std::string& o = transport.out;
    size_t pos = 0;
    while (o.size() - pos >= 9) {
      const size_t n = (uint8_t(o[pos]) << 16) | (uint8_t(o[pos + 1]) << 8) | uint8_t(o[pos + 2]);
      if (o.size() - pos < 9 + n) break;
      if (o[pos + 3] == 1) {
        std::map<std::string, std::string> h;
        testing::inflateHeaders(inflater, std::string_view(o).substr(pos + 9, n), h);
        if (h.count("grpc-status") != 0) status = h["grpc-status"];
      }
      pos += 9 + n;
    }
    o.erase(0, pos);
    return status;
  }
  bool answered(const std::string& status) { return lastStatus() == status; }
  ~ModelInferSession() override { nghttp2_hd_inflate_del(inflater); }

  nghttp2_hd_inflater* inflater = [] {
    nghttp2_hd_inflater* i = nullptr;
    nghttp2_hd_inflate_new(&i);
    return i;
  }();
  Http2SessionOptions options;
  CopyingTransport transport;
  backends::ModelRegistry registry;
  SlotModel* model = nullptr;
  std::unique_ptr<InferenceGrpcServices> services;
  std::shared_ptr<Http2Session> session;
};

TEST_F(ModelInferSession, RawContentsGoFromDataChunksIntoSlotsAtEverySplit) {
  const std::string wire = request().SerializeAsString();
  uint32_t id = 1;
  for (size_t i = 1; i < wire.size() + 5; ++i) {
    for (int copying = 0; copying < 2; ++copying) {
      model->seen.clear();
      std::fill(model->arena.begin(), model->arena.end(), 0xEE);
      transport.copying = copying != 0;
      feed(call(id, wire, {i, i + 7}));
      id += 2;
      ASSERT_EQ(model->seen.size(), 1u) << i;
      const backends::InferRequest& r = model->seen[0];
      ASSERT_EQ(r.inputs.size(), 2u);
      EXPECT_EQ(r.inputs[0].slot, model->arena.data()) << i;
      EXPECT_EQ(r.inputs[1].slot, model->arena.data() + 12);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(model->arena.data()), 17), kA + kB);
      EXPECT_EQ(model->arena[17], 0xEE);
      // Tensor bytes that came from the transport's copy, and only those.
      EXPECT_EQ(r.received_copy_bytes, copying ? 17u : 0u) << i;
    }
  }
  EXPECT_EQ(session->stats().gathered_bytes, 0u);
  EXPECT_GT(model->placements, 0);
}

TEST_F(ModelInferSession, AdmissionRefusalAnswersBeforeAnyCopy) {
  model->admit = absl::UnavailableError("queue full for model 'm'");
  const std::string wire = request().SerializeAsString();
  const size_t header_end = wire.find(kA);
  // The header in the first DATA frame, the tensors in later ones.
  feed(call(1, wire, {header_end + 5 + 2, header_end + 5 + 8}));
  EXPECT_EQ(model->admissions, 1);
  EXPECT_EQ(model->placements, 0);
  EXPECT_TRUE(model->seen.empty());
  for (uint8_t b : model->arena) EXPECT_EQ(b, 0xEE);
  EXPECT_TRUE(answered("14"));
  EXPECT_EQ(session->stats().gathered_bytes, 0u);
  // The connection keeps serving.
  model->admit = absl::OkStatus();
  feed(call(3, wire, {10}));
  ASSERT_EQ(model->seen.size(), 1u);
  EXPECT_TRUE(answered("0"));
}

TEST_F(ModelInferSession, ReorderedFieldsFallBackCountedAndCorrect) {
  // The second input's description after the raw contents: legal, gathered, counted.
  inference::ModelInferRequest m = request();
  inference::ModelInferRequest tail;
  *tail.add_inputs() = m.inputs(1);
  m.mutable_inputs()->RemoveLast();
  std::string wire = m.SerializeAsString() + tail.SerializeAsString();
  feed(call(1, wire, {wire.size() / 2}));
  ASSERT_EQ(model->seen.size(), 1u);
  const backends::InferRequest& r = model->seen[0];
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.inputs[0].bytes()), 12), kA);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.inputs[1].bytes()), 5), kB);
  EXPECT_EQ(r.received_copy_bytes, 17u);  // every tensor byte went through the gather
  EXPECT_GT(session->stats().gathered_bytes, 0u);
  EXPECT_TRUE(answered("0"));
}

TEST_F(ModelInferSession, OneDataFrameIsDecodedInPlace) {
  const std::string wire = request().SerializeAsString();
  feed(call(1, wire, {}));
  ASSERT_EQ(model->seen.size(), 1u);
  EXPECT_EQ(model->seen[0].inputs[0].slot, model->arena.data());
  EXPECT_EQ(model->seen[0].received_copy_bytes, 0u);
  EXPECT_EQ(session->stats().gathered_bytes, 0u);
}

}  // namespace
}  // namespace infergate::frontend
