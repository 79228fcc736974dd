// Issue 16: the streaming PredictRequest decoder (frontend/tf_predict_stream.h) against the
// whole-message decode (scanPredictRequest + decodePredictInputs, in the service's order) at
// every 2-way and 3-way split and byte by byte: the same answer (tensors or error), the
// tensor_content of one input written straight into its slot and nowhere else, fallbacks for
// every other layout (several inputs, output_filter after the tensor, key after value, content
// before the shape, typed values, unknown model, decode errors), hostile lengths, refusal
// before copying, and received_copy_bytes exact. Then Predict through the real Http2Session +
// InferenceGrpcServices: streamed at every DATA split, counted exactly.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/model.h"
#include "common/protowire.h"
#include "frontend/grpc_framing.h"
#include "frontend/grpc_inference_service.h"
#include "frontend/http2_session.h"
#include "frontend/tf_predict_codec.h"
#include "frontend/tf_predict_stream.h"
#include "tests/mocks/fake_transport.h"
#include "tests/unit/frontend/h2_frames.h"
#include "tf_predict.pb.h"

namespace infergate::frontend {
namespace {

using backends::DataType;
using backends::InferRequest;
namespace pw = common::protowire;

backends::ModelConfig modelConfig() {
  backends::ModelConfig c;
  c.name = "m";
  c.inputs = {{"x", DataType::kFp32, {-1}}, {"y", DataType::kInt32, {2}}};
  c.outputs = {{"o", DataType::kFp32, {-1}}};
  return c;
}

std::string floats(size_t n, float base) {
  std::string s(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    const float v = base + static_cast<float>(i) * 0.5f;
    std::memcpy(s.data() + 4 * i, &v, 4);
  }
  return s;
}

tensorflow::TensorProto contentTensor(tensorflow::DataType dt, std::vector<int64_t> shape,
                                      const std::string& bytes) {
  tensorflow::TensorProto t;
  t.set_dtype(dt);
  for (int64_t d : shape) t.mutable_tensor_shape()->add_dim()->set_size(d);
  t.set_tensor_content(bytes);
  return t;
}

tensorflow::serving::PredictRequest oneInput(size_t n = 64) {
  tensorflow::serving::PredictRequest r;
  r.mutable_model_spec()->set_name("m");
  r.mutable_model_spec()->set_signature_name("serving_default");
  (*r.mutable_inputs())["x"] =
      contentTensor(tensorflow::DT_FLOAT, {static_cast<int64_t>(n)}, floats(n, 1.f));
  return r;
}

// An arena the placer hands out (guard bytes around); what was written where is checked.
struct Arena {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(1 << 16, 0xEE);
  int placements = 0;
  size_t used = 0;
  backends::InputPlacer placer() {
    return [this](InferRequest& r) {
      ++placements;
      size_t at = 64;
      for (auto& t : r.inputs) {
        if (at + t.slot_bytes + 64 > bytes.size()) return false;
        t.slot = bytes.data() + at;
        at += t.slot_bytes;
      }
      used = at;
      return true;
    };
  }
  // memset and memcmp, not loops: the differential tests clear and check the arena once per
  // split, and the test code compiles at -O0 (under ASan a byte loop took most of a minute).
  void clear() {
    std::memset(bytes.data(), 0xEE, bytes.size());
    placements = 0;
    used = 0;
  }
  bool untouchedOutside() const {
    static const std::vector<uint8_t> kFill(1 << 16, 0xEE);
    const size_t end = std::min(used, bytes.size());
    return std::memcmp(bytes.data(), kFill.data(), 64) == 0 &&
           std::memcmp(bytes.data() + end, kFill.data(), bytes.size() - end) == 0;
  }
};

struct Outcome {
  absl::Status status;
  std::vector<std::string> names, data;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DataType> dtypes;
  uint64_t received_copy = 0;
  bool streamed = false;
};

void fill(Outcome& o, const InferRequest& r) {
  for (const auto& t : r.inputs) {
    o.names.push_back(t.name);
    o.shapes.push_back(t.shape);
    o.dtypes.push_back(t.dtype);
    o.data.emplace_back(reinterpret_cast<const char*>(t.bytes()), t.byteSize());
  }
}

// The whole-message decode, in the service's order (InferenceGrpcServices::predict).
Outcome whole(std::string_view wire, const backends::ModelConfig& cfg, Arena& arena,
              const absl::Status& admit, int copies_before = 0) {
  Outcome o;
  PredictRequestScan scan;
  o.status = scanPredictRequest(wire, scan);
  if (!o.status.ok()) return o;
  if (scan.spec.name != cfg.name) {
    o.status = absl::NotFoundError("no model " + scan.spec.name);
    return o;
  }
  if (!admit.ok()) {
    o.status = admit;
    return o;
  }
  InferRequest req;
  const backends::InputPlacer place = arena.placer();
  uint64_t copied = 0;
  o.status = decodePredictInputs(scan, cfg, req, &place, &copied);
  if (!o.status.ok()) return o;
  o.received_copy = copied * static_cast<uint64_t>(copies_before);
  fill(o, req);
  return o;
}

// The streaming decoder over `wire` cut at `cuts`; pieces with an odd index delivered as
// copies when `copy_odd`.
Outcome streamed(const std::string& wire, const std::vector<size_t>& cuts,
                 const backends::ModelConfig& cfg, Arena& arena, const absl::Status& admit,
                 PredictStreamDecoder& d, bool copy_odd = false, size_t* refused_at = nullptr) {
  int admissions = 0;
  const PredictStreamHook hook = [&](PredictRequestScan& scan,
                                     InferRequest& req) -> absl::StatusOr<bool> {
    if (scan.spec.name != cfg.name) return false;
    ++admissions;
    if (!admit.ok()) return admit;
    const backends::InputPlacer place = arena.placer();
    return decodePredictInputs(scan, cfg, req, &place).ok();
  };
  Outcome o;
  d.begin(wire.size(), &hook);
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(wire.size());
  for (size_t i = 0; i < ends.size(); ++i) {
    const size_t e = std::max(at, std::min(ends[i], wire.size()));
    absl::Status st = d.piece(wire.data() + at, e - at, copy_odd && (i % 2) == 1);
    at = e;
    if (!st.ok()) {
      if (refused_at != nullptr) *refused_at = at;
      o.status = st;
      d.reset();
      return o;
    }
  }
  PredictStreamDecoder::Result r = d.finish();
  o.status = r.status;
  if (!r.status.ok()) return o;
  if (r.streamed) {
    o.streamed = true;
    o.received_copy = r.request.received_copy_bytes;
    fill(o, r.request);
    EXPECT_EQ(r.copied_bytes, r.request.inputs[0].byteSize());
    return o;
  }
  arena.clear();  // the whole decode places again
  return whole(r.whole, cfg, arena, admit, r.copies_before);
}

void expectSame(const Outcome& a, const Outcome& b, const std::string& where) {
  ASSERT_EQ(a.status, b.status) << where;
  EXPECT_EQ(a.names, b.names) << where;
  EXPECT_EQ(a.shapes, b.shapes) << where;
  EXPECT_EQ(a.dtypes, b.dtypes) << where;
  EXPECT_EQ(a.data, b.data) << where;
}

// Every 2-way split, 3-way splits (all for short messages, strided for long ones) and byte
// by byte: the same outcome as the whole decode, streamed or not as `expect_streamed`.
// `expect_streamed`: 1 streamed, 0 not, -1 either (mutated bytes).
// `pairs`: also every two-cut split on a grid (the costly part: hostile variants skip it, so the
// sanitized CI run stays short).
void differential(const std::string& wire, int expect_streamed,
                  const absl::Status& admit = absl::OkStatus(),
                  const backends::ModelConfig& cfg = modelConfig(), bool pairs = true) {
  Arena arena;
  const Outcome want = whole(wire, cfg, arena, admit);
  const size_t step = std::max<size_t>(1, wire.size() / 24);
  std::vector<std::vector<size_t>> splits;
  for (size_t i = 0; i <= wire.size(); ++i) splits.push_back({i});
  for (size_t i = 0; pairs && i <= wire.size(); i += step) {
    for (size_t j = i; j <= wire.size(); j += step) splits.push_back({i, j});
  }
  std::vector<size_t> bytewise;
  for (size_t i = 1; i < wire.size(); ++i) bytewise.push_back(i);
  splits.push_back(bytewise);
  PredictStreamDecoder d;
  for (const auto& cuts : splits) {
    for (int copy = 0; copy < 2; ++copy) {
      arena.clear();
      const uint64_t before = d.streamedMessages();
      const Outcome got = streamed(wire, cuts, cfg, arena, admit, d, copy != 0);
      std::string where = "cuts";
      for (size_t c : cuts.size() > 3 ? std::vector<size_t>{} : cuts)
        where += " " + std::to_string(c);
      if (cuts.size() > 3) where += " bytewise";
      expectSame(got, want, where);
      if (expect_streamed >= 0) {
        const bool s = expect_streamed == 1 && want.status.ok();
        EXPECT_EQ(d.streamedMessages() - before, s ? 1u : 0u) << where;
        EXPECT_EQ(got.streamed, s) << where;
      }
      if (!got.status.ok()) continue;
      // Each tensor byte written into the slot, nowhere else.
      EXPECT_TRUE(arena.untouchedOutside()) << where;
      uint64_t bytes = 0;
      for (const auto& s : got.data) bytes += s.size();
      if (got.streamed) {
        // Only the tensor bytes delivered from a transport's copy count.
        uint64_t from_copies = 0;
        if (copy != 0) {
          const size_t data_start = wire.size() - bytes;
          std::vector<size_t> ends = cuts;
          ends.push_back(wire.size());
          size_t at = 0;
          for (size_t i = 0; i < ends.size(); ++i) {
            const size_t e = std::max(at, std::min(ends[i], wire.size()));
            if (i % 2 == 1) from_copies += e - std::max(at, std::min(e, data_start));
            at = e;
          }
        }
        EXPECT_EQ(got.received_copy, from_copies) << where;
      } else {
        // Gathered: once more each, and once more again when some piece came from a copy.
        bool any_copy = false;
        std::vector<size_t> ends = cuts;
        ends.push_back(wire.size());
        size_t at = 0;
        for (size_t i = 0; i < ends.size(); ++i) {
          const size_t e = std::max(at, std::min(ends[i], wire.size()));
          any_copy = any_copy || (copy != 0 && i % 2 == 1 && e > at);
          at = e;
        }
        EXPECT_EQ(got.received_copy, bytes * (any_copy ? 2 : 1)) << where;
      }
    }
  }
}

std::string entry(const std::string& key, const std::string& value_bytes, bool key_first = true) {
  std::string e;
  if (key_first) pw::putString(e, 1, key);
  pw::putString(e, 2, value_bytes);
  if (!key_first) pw::putString(e, 1, key);
  std::string out;
  pw::putString(out, 2, e);
  return out;
}

std::string spec() {
  std::string s, out;
  pw::putString(s, 1, "m");
  pw::putString(out, 1, s);
  return out;
}

std::string shapeOf(int64_t n) {
  std::string dim, shape, out;
  pw::putVarintField(dim, 1, static_cast<uint64_t>(n));
  pw::putString(shape, 2, dim);
  return shape;
}

TEST(PredictStream, OneInputIsStreamedIntoItsSlotAtEverySplit) {
  differential(oneInput(16).SerializeAsString(), 1);
  differential(oneInput(300).SerializeAsString(), 1);
}

TEST(PredictStream, WithoutTheChangeTheMessageWasGathered) {
  // One input through the decoder: no gather, the tensor bytes straight from the pieces.
  const std::string wire = oneInput(4096).SerializeAsString();
  PredictStreamDecoder d;
  Arena arena;
  const Outcome o = streamed(wire, {100, 5000, 9000}, modelConfig(), arena, absl::OkStatus(), d);
  ASSERT_TRUE(o.status.ok());
  EXPECT_TRUE(o.streamed);
  EXPECT_EQ(o.received_copy, 0u);
  EXPECT_EQ(o.data[0], floats(4096, 1.f));
  EXPECT_EQ(arena.placements, 1);
  EXPECT_LT(d.gatheredBytes(), 1u);
  EXPECT_LE(d.bufferedBytes(), PredictStreamDecoder::kMaxHeadBytes);
}

TEST(PredictStream, SeveralInputsFallBackToTheWholeDecode) {
  tensorflow::serving::PredictRequest r = oneInput(32);
  tensorflow::TensorProto y;
  y.set_dtype(tensorflow::DT_INT32);
  y.mutable_tensor_shape()->add_dim()->set_size(2);
  y.add_int_val(7);
  y.add_int_val(-9);
  (*r.mutable_inputs())["y"] = y;
  differential(r.SerializeAsString(), 0);
  // Both with tensor_content.
  (*r.mutable_inputs())["y"] = contentTensor(tensorflow::DT_INT32, {2}, std::string(8, '\x05'));
  differential(r.SerializeAsString(), 0);
}

TEST(PredictStream, UnusualOrdersFallBack) {
  const std::string content = floats(20, 3.f);
  std::string value;
  pw::putVarintField(value, 1, tensorflow::DT_FLOAT);
  pw::putString(value, 2, shapeOf(20));
  pw::putString(value, 4, content);
  // Key after value.
  differential(spec() + entry("x", value, false), 0);
  // tensor_content before dtype and shape.
  std::string early;
  pw::putString(early, 4, content);
  pw::putVarintField(early, 1, tensorflow::DT_FLOAT);
  pw::putString(early, 2, shapeOf(20));
  differential(spec() + entry("x", early), 0);
  // model_spec after the inputs.
  differential(entry("x", value) + spec(), 0);
  // output_filter after the tensor.
  std::string filter;
  pw::putString(filter, 3, "o");
  differential(spec() + entry("x", value) + filter, 0);
  // The same key twice: the last entry wins (streamed: it is the last field).
  std::string other;
  pw::putVarintField(other, 1, tensorflow::DT_FLOAT);
  pw::putString(other, 2, shapeOf(2));
  pw::putString(other, 4, floats(2, 9.f));
  differential(spec() + entry("x", other) + entry("x", value), 1);
  // Two tensor_content fields in one value: the last wins.
  std::string twice;
  pw::putString(twice, 4, floats(3, 1.f));
  pw::putVarintField(twice, 1, tensorflow::DT_FLOAT);
  pw::putString(twice, 2, shapeOf(20));
  pw::putString(twice, 4, content);
  differential(spec() + entry("x", twice), 1);
  // Typed values.
  tensorflow::serving::PredictRequest typed;
  typed.mutable_model_spec()->set_name("m");
  auto& t = (*typed.mutable_inputs())["x"];
  t.set_dtype(tensorflow::DT_FLOAT);
  t.mutable_tensor_shape()->add_dim()->set_size(3);
  for (float f : {1.f, 2.f, 3.f}) t.add_float_val(f);
  differential(typed.SerializeAsString(), 0);
}

TEST(PredictStream, ErrorsAreTheWholeDecodersErrors) {
  // Unknown model, a dtype the input does not take, DT_STRING with content, an unknown key, a
  // shape the content does not fill (validateRequest's: still decoded), an invalid key.
  tensorflow::serving::PredictRequest r = oneInput(8);
  r.mutable_model_spec()->set_name("nope");
  differential(r.SerializeAsString(), 0);
  r = oneInput(8);
  (*r.mutable_inputs())["x"].set_dtype(tensorflow::DT_INT32);
  differential(r.SerializeAsString(), 0);
  (*r.mutable_inputs())["x"].set_dtype(tensorflow::DT_STRING);
  differential(r.SerializeAsString(), 0);
  r = oneInput(8);
  (*r.mutable_inputs())["z"] = (*r.mutable_inputs())["x"];
  r.mutable_inputs()->erase("x");
  differential(r.SerializeAsString(), 0);
  r = oneInput(8);
  (*r.mutable_inputs())["x"].mutable_tensor_shape()->mutable_dim(0)->set_size(9);
  differential(r.SerializeAsString(), 1);
  std::string value;
  pw::putVarintField(value, 1, tensorflow::DT_FLOAT);
  pw::putString(value, 4, floats(4, 0.f));
  differential(spec() + entry("\xff", value), 0);  // not UTF-8
  // An invalid field before the entry (wire type 7).
  differential(std::string("\x0f", 1) + spec() + entry("x", value), 0);
}

TEST(PredictStream, HostileLengthsAreCheckedBeforeAnyByte) {
  const std::string good = oneInput(16).SerializeAsString();
  // Each length byte of the message raised or lowered, and cut short: the whole decoder's answer.
  for (size_t i = 0; i < 40 && i < good.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x7f}, uint8_t{0xff}}) {  // 0x80 ~ 0xff (continuation)
      std::string w = good;
      w[i] = static_cast<char>(v);
      differential(w, -1, absl::OkStatus(), modelConfig(), /*pairs=*/false);
    }
  }
}

TEST(PredictStream, RefusedBeforeCopying) {
  const std::string wire = oneInput(256).SerializeAsString();
  PredictStreamDecoder d;
  Arena arena;
  size_t at = 0;
  const absl::Status busy = absl::UnavailableError("queue full for model 'm'");
  const Outcome o = streamed(wire, {20, 40, 600}, modelConfig(), arena, busy, d, false, &at);
  EXPECT_EQ(o.status, busy);
  EXPECT_EQ(at, 600u);  // answered at the piece holding the first tensor byte
  EXPECT_GT(wire.size() - 1024, 40u);
  EXPECT_EQ(arena.placements, 0);
  EXPECT_TRUE(arena.untouchedOutside());
  // The whole decoder's answer is the same.
  Arena a2;
  EXPECT_EQ(whole(wire, modelConfig(), a2, busy).status, busy);
}

TEST(PredictStream, HeaderLargerThanTheBoundIsGathered) {
  tensorflow::serving::PredictRequest r = oneInput(16);
  r.mutable_model_spec()->set_signature_name(std::string(200, 's'));
  const std::string wire = r.SerializeAsString();
  PredictStreamDecoder d(64);
  Arena arena;
  const Outcome o =
      streamed(wire, {10, 20, 30, 40, 50, 100, 300}, modelConfig(), arena, absl::OkStatus(), d);
  Arena a2;
  expectSame(o, whole(wire, modelConfig(), a2, absl::OkStatus()), "bounded");
  EXPECT_FALSE(o.streamed);
  EXPECT_EQ(d.fallbacks(), 1u);
}

// --- through the session ----------------------------------------------------------------------

using testing::frame;
using testing::literal;

struct CopyingTransport : mocks::FakeTransport {
  bool copying = false;
  bool deliveringCopy() const override { return copying; }
};

class SlotModel : public backends::Model {
 public:
  SlotModel() {  // x only (validateRequest wants every input); y when a test adds it
    cfg_ = modelConfig();
    cfg_.inputs.pop_back();
  }
  const backends::ModelConfig& config() const override { return cfg_; }
  bool ready() const override { return true; }
  void infer(InferRequest request, backends::InferCallback done) override {
    seen.push_back(std::move(request));
    backends::InferResponse r;
    r.model_name = "m";
    done(std::move(r));
  }
  bool placeInputs(InferRequest& r) override {
    ++placements;
    size_t at = 0;
    for (auto& t : r.inputs) {
      if (at + t.slot_bytes > arena.size()) return false;
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
  std::vector<InferRequest> seen;
  std::vector<uint8_t> arena = std::vector<uint8_t>((1 << 20) + 64, 0xEE);
  int placements = 0, admissions = 0;
  absl::Status admit = absl::OkStatus();
};

std::string headers() {
  return literal(":method", "POST") + literal(":scheme", "http") +
         literal(":path", "/tensorflow.serving.PredictionService/Predict") +
         literal(":authority", "x") + literal("content-type", "application/grpc") +
         literal("te", "trailers");
}

struct PredictSession : ::testing::Test {
  PredictSession() {
    auto m = std::make_unique<SlotModel>();
    model = m.get();
    registry.add(std::move(m));
    services = std::make_unique<InferenceGrpcServices>(registry, ServerInfo{}, nullptr);
    options.initial_window_bytes = 4 << 20;  // the 1 MiB message in one window
    session = std::make_shared<Http2Session>(transport, *services, options, nullptr);
    const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                                frame(4, 0, 0, "") + frame(4, 1, 0, "");  // and our SETTINGS' ACK
    session->onData(preface.data(), preface.size());
    lastStatus();
  }
  void feed(const std::string& s) { session->onData(s.data(), s.size()); }
  // The message on stream `id`, its DATA frames cut at `cuts` (each at most 16 KiB: more
  // frames in between when needed).
  std::string call(uint32_t id, const std::string& wire, const std::vector<size_t>& cuts) {
    std::string body;
    appendGrpcMessage(body, wire);
    std::string out = frame(1, 4, id, headers());
    size_t at = 0;
    std::vector<size_t> ends;
    for (size_t c : cuts) {
      while (ends.empty() ? c > 16384 : c > ends.back() + 16384) {
        ends.push_back((ends.empty() ? 0 : ends.back()) + 16384);
      }
      ends.push_back(c);
    }
    while ((ends.empty() ? 0 : ends.back()) + 16384 < body.size()) {
      ends.push_back((ends.empty() ? 0 : ends.back()) + 16384);
    }
    ends.push_back(body.size());
    for (size_t i = 0; i < ends.size(); ++i) {
      const size_t e = std::max(at, std::min(ends[i], body.size()));
      out += frame(0, i + 1 == ends.size() ? 1 : 0, id, body.substr(at, e - at));
      at = e;
    }
    return out;
  }
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
  ~PredictSession() override { nghttp2_hd_inflate_del(inflater); }

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

TEST_F(PredictSession, TensorContentGoesFromDataChunksIntoTheSlotAtEverySplit) {
  const std::string wire = oneInput(16).SerializeAsString();
  const std::string content = floats(16, 1.f);
  uint32_t id = 1;
  for (size_t i = 1; i < wire.size() + 5; ++i) {
    for (int copying = 0; copying < 2; ++copying) {
      model->seen.clear();
      std::fill(model->arena.begin(), model->arena.end(), 0xEE);
      transport.copying = copying != 0;
      feed(call(id, wire, {i, i + 7}));
      id += 2;
      ASSERT_EQ(model->seen.size(), 1u) << i;
      EXPECT_EQ(lastStatus(), "0");
      const InferRequest& r = model->seen[0];
      ASSERT_EQ(r.inputs.size(), 1u);
      EXPECT_EQ(r.inputs[0].slot, model->arena.data()) << i;
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(model->arena.data()), 64), content);
      EXPECT_EQ(model->arena[64], 0xEE);
      EXPECT_EQ(r.received_copy_bytes, copying ? 64u : 0u) << i;
    }
  }
  EXPECT_EQ(session->stats().gathered_bytes, 0u);
}

TEST_F(PredictSession, OneMiBTensorIsCopiedOnce) {
  const size_t n = (1 << 20) / 4;
  const std::string wire = oneInput(n).SerializeAsString();
  feed(call(1, wire, {}));
  ASSERT_EQ(model->seen.size(), 1u);
  EXPECT_EQ(lastStatus(), "0");
  const InferRequest& r = model->seen[0];
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].slot, model->arena.data());
  EXPECT_EQ(std::memcmp(model->arena.data(), floats(n, 1.f).data(), n * 4), 0);
  EXPECT_EQ(r.received_copy_bytes, 0u);  // before: 1 MiB (gathered), now none
  EXPECT_EQ(session->stats().gathered_bytes, 0u);
}

TEST_F(PredictSession, OneMiBTensorFollowedByAFieldIsGatheredAndCounted) {
  // The layout the stream cannot take (output_filter after the tensor): the path every split
  // Predict took before, two copies of each tensor byte, both counted.
  const size_t n = (1 << 20) / 4;
  tensorflow::serving::PredictRequest r = oneInput(n);
  r.add_output_filter("o");
  const std::string wire = r.SerializeAsString();
  feed(call(1, wire, {}));
  ASSERT_EQ(model->seen.size(), 1u);
  EXPECT_EQ(lastStatus(), "0");
  EXPECT_EQ(std::memcmp(model->seen[0].inputs[0].bytes(), floats(n, 1.f).data(), n * 4), 0);
  EXPECT_EQ(model->seen[0].received_copy_bytes, n * 4);
  EXPECT_EQ(session->stats().gathered_bytes, wire.size());
}

TEST_F(PredictSession, AdmissionRefusalAnswersBeforeAnyCopy) {
  model->admit = absl::UnavailableError("queue full for model 'm'");
  const std::string wire = oneInput(256).SerializeAsString();
  feed(call(1, wire, {30, 200}));
  EXPECT_EQ(model->admissions, 1);
  EXPECT_EQ(model->placements, 0);
  EXPECT_TRUE(model->seen.empty());
  for (size_t i = 0; i < 2048; ++i) ASSERT_EQ(model->arena[i], 0xEE);
  EXPECT_EQ(lastStatus(), "14");
  model->admit = absl::OkStatus();
  feed(call(3, wire, {30}));
  ASSERT_EQ(model->seen.size(), 1u);
  EXPECT_EQ(lastStatus(), "0");
}

TEST_F(PredictSession, SeveralInputsAreGatheredCountedAndCorrect) {
  model->cfg_ = modelConfig();
  tensorflow::serving::PredictRequest r = oneInput(16);
  (*r.mutable_inputs())["y"] = contentTensor(tensorflow::DT_INT32, {2}, std::string(8, '\x05'));
  const std::string wire = r.SerializeAsString();
  feed(call(1, wire, {wire.size() / 2}));
  ASSERT_EQ(model->seen.size(), 1u);
  EXPECT_EQ(lastStatus(), "0");
  const InferRequest& q = model->seen[0];
  ASSERT_EQ(q.inputs.size(), 2u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(q.inputs[0].bytes()), 64), floats(16, 1.f));
  EXPECT_EQ(q.received_copy_bytes, 72u);  // every tensor byte went through the gather
  EXPECT_EQ(session->stats().gathered_bytes, wire.size());
}

TEST_F(PredictSession, UnknownModelIsTheWholeDecodersAnswer) {
  tensorflow::serving::PredictRequest r = oneInput(16);
  r.mutable_model_spec()->set_name("nope");
  const std::string wire = r.SerializeAsString();
  feed(call(1, wire, {20}));
  EXPECT_EQ(lastStatus(), "5");
  EXPECT_TRUE(model->seen.empty());
}

}  // namespace
}  // namespace infergate::frontend
