// The streaming KServe body decoder (frontend/kserve_body_stream.h): fed in every piece size,
// with the body's length known (Content-Length) or not (chunked), from copied or uncopied
// transport bytes, it gives exactly decodeInferRequest's request or error for the same bytes,
// writes binary tensors straight into their slots, counts received_copy_bytes exactly, and
// refuses before copying.
#include "frontend/kserve_body_stream.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "frontend/kserve_json.h"
#include "tests/unit/frontend/placing_model.h"

namespace infergate::frontend {
namespace {

using backends::DataType;
using backends::InferRequest;
using testing::PlacingModel;

backends::ModelConfig multiModel() {
  backends::ModelConfig c;
  c.name = "m";
  c.version = "1";
  c.inputs = {{"x", DataType::kFp32, {1, 3}}, {"y", DataType::kInt32, {2}},
              {"s", DataType::kBytes, {1}}};
  c.outputs = c.inputs;
  return c;
}

// multiModel with only the inputs `names` (the model a case's request is valid for: the stream
// refuses a request its header shows invalid, validateRequestHeader).
backends::ModelConfig only(std::initializer_list<std::string_view> names) {
  backends::ModelConfig c = multiModel();
  std::vector<backends::TensorSpec> keep;
  for (const auto& s : c.inputs) {
    if (std::find(names.begin(), names.end(), s.name) != names.end()) keep.push_back(s);
  }
  c.inputs = keep;
  return c;
}

backends::ModelConfig rawModel() {
  backends::ModelConfig c;
  c.name = "r";
  c.version = "1";
  c.inputs = {{"x", DataType::kFp32, {-1}}};
  c.outputs = {{"x_out", DataType::kFp32, {-1}}};
  return c;
}

std::string f32(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}
std::string i32(std::initializer_list<int32_t> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}

struct Case {
  std::string name;
  std::string header;  // the JSON header (N = its size), or empty for a raw body
  std::string binary;  // what follows it
  std::optional<size_t> header_length;  // overrides N (hostile lengths)
  std::string body() const { return header + binary; }
  size_t n() const { return header_length.value_or(header.size()); }
};

const std::string kX = R"({"name":"x","datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":12}})";
const std::string kYJson = R"({"name":"y","datatype":"INT32","shape":[2],"data":[7,8]})";
const std::string kYBin = R"({"name":"y","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}})";

std::vector<Case> cases() {
  const std::string xb = f32({1.5f, -2.0f, 3.25f});
  const std::string yb = i32({5, -6});
  std::vector<Case> c;
  c.push_back({"binary_and_json", R"({"id":"a","inputs":[)" + kX + "," + kYJson +
                                      R"(],"outputs":[{"name":"x","parameters":{"binary_data":true}}]})",
               xb});
  c.push_back({"two_binary", R"({"inputs":[)" + kX + "," + kYBin + R"(],"parameters":{"priority":2}})",
               xb + yb});
  c.push_back({"overlong", R"({"inputs":[)" + kX + "]}", xb + "abc"});
  c.push_back({"short", R"({"inputs":[)" + kX + "," + kYBin + "]}", xb + "abc"});
  c.push_back({"header_over_body", R"({"inputs":[)" + kX + "]}", xb, 400});
  c.push_back({"header_huge", R"({"inputs":[)" + kX + "]}", xb, size_t{1} << 60});
  c.push_back({"sizes_overflow",
               R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":18446744073709551615}},)" +
                   kYBin + "]}",
               xb + yb});
  c.push_back({"overrun_then_bad_input",
               R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":100}},{"datatype":"INT32"}]})",
               xb});
  c.push_back({"size_mismatch_then_short",
               R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":16}}]})",
               xb});
  c.push_back({"bad_json_data_then_overlong",
               R"({"inputs":[)" + kX + R"(,{"name":"y","datatype":"INT32","shape":[2],"data":[1.5,2]}]})",
               xb + "zz"});
  c.push_back({"bad_outputs", R"({"inputs":[)" + kX + R"(],"outputs":7})", xb});
  c.push_back({"bytes_binary",
               R"({"inputs":[{"name":"s","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":7}}]})",
               std::string("\x03\x00\x00\x00" "abc", 7)});
  c.push_back({"bytes_binary_bad",
               R"({"inputs":[{"name":"s","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":5}}]})",
               std::string("\x09\x00\x00\x00" "a", 5)});
  c.push_back({"malformed_json", R"({"inputs":[)", xb});
  c.push_back({"no_binary_part", R"({"inputs":[)" + kYJson + "]}", ""});
  c.push_back({"unclaimed_only", R"({"inputs":[)" + kYJson + "]}", "q"});
  return c;
}

std::string describe(const absl::StatusOr<InferRequest>& r) {
  if (!r.ok()) return "error: " + r.status().ToString();
  std::string s = "ok id=" + r->id + " prio=" + std::to_string(r->priority) +
                  " bin_out=" + std::to_string(r->binary_data_output) + " outputs=";
  for (const auto& o : r->outputs) s += o.name + (o.binary ? "(b)" : "") + ",";
  for (const auto& t : r->inputs) {
    s += " [" + t.name + " " + std::string(backends::dataTypeName(t.dtype)) + " " +
         backends::shapeToString(t.shape) + " " +
         std::string(reinterpret_cast<const char*>(t.bytes()), t.byteSize()) + "]";
  }
  return s;
}

// Feeds `body` in pieces of `piece` bytes; returns finish()'s result.
absl::StatusOr<InferRequest> stream(KServeBodyStream& s, std::string_view body, size_t piece,
                                    bool copied, bool* refused) {
  for (size_t off = 0; off < body.size(); off += piece) {
    s.onBody(body.data() + off, std::min(piece, body.size() - off), copied);
  }
  return s.finish(refused);
}

constexpr uint64_t kMaxBody = 1 << 20;

TEST(KServeBodyStreamTest, EverySplitMatchesTheWholeBodyDecoder) {
  for (const Case& c : cases()) {
    PlacingModel model(multiModel());
    const backends::InputPlacer place = [&](InferRequest& r) { return model.placeInputs(r); };
    const std::string body = c.body();
    const absl::StatusOr<InferRequest> whole =
        decodeInferRequest(body, c.n(), model.config(), "m", "1", &place);
    // A request whose header the model refuses (a missing input, a batch too large) is refused
    // before its bytes are placed: validateRequestHeader's error, where the whole-body path
    // gives the same one from validateRequest after decoding.
    // (A body assembled whole, BYTES in binary, is checked by validateRequest after it.)
    const absl::Status header_check =
        whole.ok() && c.name != "bytes_binary"
            ? backends::validateRequestHeader(model.config(), *whole)
            : absl::OkStatus();
    const std::string want = header_check.ok() ? describe(whole) : describe(header_check);
    // A decoded request's binary tensors are exactly the bytes after the header.
    const uint64_t binary_bytes = whole.ok() ? c.binary.size() : 0;
    for (bool known : {true, false}) {
      for (bool copied : {false, true}) {
        for (size_t piece = 1; piece <= body.size() + 1; ++piece) {
          SCOPED_TRACE(c.name + " known=" + std::to_string(known) + " copied=" +
                       std::to_string(copied) + " piece=" + std::to_string(piece));
          auto s = KServeBodyStream::binary(
              model, c.n(), known ? std::optional<uint64_t>(body.size()) : std::nullopt, kMaxBody,
              {});
          ASSERT_NE(s, nullptr);
          bool refused = true;
          absl::StatusOr<InferRequest> got = stream(*s, body, piece, copied, &refused);
          if (refused && !whole.ok()) {
            // A request both malformed and refused by its header (a missing input, and bytes
            // the chunked body adds later): the stream says the refusal at the header, the
            // whole decoder the malformation at the end; both INVALID_ARGUMENT.
            ASSERT_FALSE(got.ok());
            EXPECT_EQ(got.status().code(), whole.status().code()) << got.status();
          } else {
            EXPECT_EQ(refused, !header_check.ok());
            EXPECT_EQ(describe(got), want);
          }
          if (got.ok()) {
            const bool assembled = c.name == "bytes_binary";
            // Streamed: only the bytes the transport had copied count; assembled: all of them.
            EXPECT_EQ(got->received_copy_bytes,
                      assembled ? binary_bytes : (copied ? binary_bytes : 0));
            EXPECT_EQ(s->streamingBinary(), !assembled);
            for (const auto& t : got->inputs) {
              EXPECT_NE(t.slot, nullptr) << t.name;  // written straight into the slot
              EXPECT_TRUE(t.data.empty());
            }
          }
        }
      }
    }
    EXPECT_EQ(model.live_reservations, whole.ok() ? 1 : 0) << c.name;  // `whole` holds one
  }
}

TEST(KServeBodyStreamTest, WithoutPlacementTheBytesGoToTensorData) {
  PlacingModel model(only({"x", "y"}));
  model.place = false;
  const Case c = cases()[1];
  const std::string body = c.body();
  auto s = KServeBodyStream::binary(model, c.n(), body.size(), kMaxBody, {});
  bool refused = false;
  absl::StatusOr<InferRequest> got = stream(*s, body, 5, false, &refused);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->inputs[0].slot, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got->inputs[0].data.data()), 12),
            c.binary.substr(0, 12));
  EXPECT_EQ(describe(got), describe(decodeInferRequest(body, c.n(), model.config(), "m", "1")));
}

TEST(KServeBodyStreamTest, RawBinaryBodyIsPlacedAtHeaderTime) {
  PlacingModel model(rawModel());
  const std::string body = f32({1, 2, 3, 4});
  const backends::InputPlacer place = [&](InferRequest& r) { return model.placeInputs(r); };
  const std::string want = describe(decodeInferRequest(body, 0, model.config(), "r", "1", &place));
  for (size_t piece = 1; piece <= body.size(); ++piece) {
    auto s = KServeBodyStream::raw(model, body.size(), {});
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->streamingBinary());  // placed before any body byte
    bool refused = false;
    absl::StatusOr<InferRequest> got = stream(*s, body, piece, true, &refused);
    EXPECT_EQ(describe(got), want);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->received_copy_bytes, body.size());
    EXPECT_NE(got->inputs[0].slot, nullptr);
  }
  // Not a whole number of elements: decodeInferRequest's error, nothing placed.
  const int calls = model.place_calls;
  auto bad = KServeBodyStream::raw(model, 6, {});
  bool refused = false;
  EXPECT_EQ(describe(stream(*bad, "123456", 2, false, &refused)),
            describe(decodeInferRequest("123456", 0, model.config(), "r", "1")));
  EXPECT_EQ(model.place_calls, calls);
}

TEST(KServeBodyStreamTest, RawBytesBodyIsAssembled) {
  backends::ModelConfig c = rawModel();
  c.inputs[0].dtype = DataType::kBytes;
  PlacingModel model(c);
  EXPECT_EQ(KServeBodyStream::raw(model, 8, {}), nullptr);
}

TEST(KServeBodyStreamTest, AdmissionRefusalPlacesNothingAndDiscardsTheBody) {
  PlacingModel model(only({"x", "y"}));
  model.admit = absl::UnavailableError("queue full");
  model.levels = 3;
  const Case c = cases()[1];  // "priority":2 in the header
  const std::string body = c.body();
  KServeBodyStream::Priority prio;
  prio.trusted = true;
  prio.fallback = int64_t{3};
  auto s = KServeBodyStream::binary(model, c.n(), body.size(), kMaxBody, prio);
  bool refused = false;
  absl::StatusOr<InferRequest> got = stream(*s, body, 3, true, &refused);
  EXPECT_TRUE(refused);
  EXPECT_EQ(got.status(), absl::UnavailableError("queue full"));
  EXPECT_EQ(model.place_calls, 0);
  EXPECT_EQ(model.live_reservations, 0);
  EXPECT_EQ(s->assembledBytes(), c.n());  // the JSON header only: the rest was not kept
  ASSERT_EQ(model.admission_priorities.size(), 1u);
  EXPECT_EQ(model.admission_priorities[0], 2);  // the request's own priority (trusted)

  // Untrusted: the header's priority parameter is ignored, the fallback decides.
  prio.trusted = false;
  auto u = KServeBodyStream::binary(model, c.n(), body.size(), kMaxBody, prio);
  (void)stream(*u, body, 64, false, &refused);
  EXPECT_TRUE(refused);
  EXPECT_EQ(model.admission_priorities.back(), 3);
}

TEST(KServeBodyStreamTest, ErrorAfterPlacementReleasesTheReservation) {
  PlacingModel model(only({"x"}));
  const Case c = cases()[2];  // overlong
  const std::string body = c.body();
  auto s = KServeBodyStream::binary(model, c.n(), std::nullopt, kMaxBody, {});
  bool refused = false;
  for (size_t i = 0; i < body.size(); ++i) s->onBody(body.data() + i, 1, false);
  EXPECT_EQ(model.live_reservations, 1);  // placed at header time (length unknown)
  EXPECT_FALSE(s->finish(&refused).ok());
  EXPECT_EQ(model.live_reservations, 0);
}

TEST(KServeBodyStreamTest, HugeAnnouncedSizesOfAChunkedBodyAreNeverPlaced) {
  PlacingModel model(multiModel());
  const Case c = cases()[6];  // sizes_overflow
  auto s = KServeBodyStream::binary(model, c.n(), std::nullopt, kMaxBody, {});
  s->onBody(c.header.data(), c.header.size(), false);
  EXPECT_EQ(model.place_calls, 0);
  EXPECT_FALSE(s->streamingBinary());
}

// The model's limits a header decides are checked before anything is placed or reserved for
// the bytes it announces: a batch of 781,250 rows for a model of max_batch_size 8 is refused at
// the header (it allocated 48 MB before the body came), and so is an undeclared input.
TEST(KServeBodyStreamTest, AHeaderOverTheModelsLimitsIsRefusedBeforePlacement) {
  backends::ModelConfig cfg;
  cfg.name = "m";
  cfg.version = "1";
  cfg.max_batch_size = 8;
  cfg.inputs = {{"x", DataType::kFp32, {16}}};
  cfg.outputs = cfg.inputs;
  PlacingModel model(cfg);
  model.place = false;
  const std::string big =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[781250,16],"parameters":{"binary_data_size":50000000}}]})";
  const std::string other =
      R"({"inputs":[{"name":"q","datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size":64}}]})";
  for (const std::string& header : {big, other}) {
    auto s = KServeBodyStream::binary(model, header.size(), std::nullopt, kMaxBody << 6, {});
    s->onBody(header.data(), header.size(), false);
    s->onBody("\0\0\0\0", 4, false);
    bool refused = false;
    absl::StatusOr<InferRequest> got = s->finish(&refused);
    EXPECT_TRUE(refused) << header;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_EQ(model.place_calls, 0);
    EXPECT_LE(s->assembledBytes(), header.size());  // the header only: nothing for the tensor
  }
}

// Without a slot the tensor grows with the bytes that arrived, never to the announced size
// ahead of them.
TEST(KServeBodyStreamTest, AnUnplacedTensorGrowsWithTheBytesThatArrived) {
  PlacingModel model(only({"x"}));
  model.place = false;
  const std::string header = R"({"inputs":[)" + kX + "]}";
  auto s = KServeBodyStream::binary(model, header.size(), std::nullopt, kMaxBody, {});
  s->onBody(header.data(), header.size(), false);
  s->onBody("\x01\x02\x03\x04", 4, false);
  bool refused = false;
  absl::StatusOr<InferRequest> got = s->finish(&refused);  // 4 of 12 bytes: an error
  EXPECT_FALSE(got.ok());
}

}  // namespace
}  // namespace infergate::frontend
