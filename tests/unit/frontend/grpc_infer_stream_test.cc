// The streaming ModelInferRequest decoder (frontend/grpc_infer_stream.h) against the
// whole-message decoder: every split point of small messages (several raw inputs, typed
// contents, parameters, outputs after inputs), the same request or the same error; exact slot
// writes and copy counts; hostile lengths; refusal before copying; legal reordered fields by
// the counted fallback.
#include "frontend/grpc_infer_stream.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/protowire.h"
#include "frontend/grpc_kserve_codec.h"
#include "grpc_service.pb.h"
#include "tests/mocks/tensor_bytes.h"

namespace infergate::frontend {
namespace {

namespace protowire = common::protowire;
using backends::InferRequest;
using mocks::le;

// A placing hook over a fixed arena; counts calls and can refuse.
struct ArenaHook {
  std::vector<uint8_t> arena = std::vector<uint8_t>(1 << 16, 0xEE);
  int calls = 0;
  absl::Status refuse = absl::OkStatus();
  bool place = true;
  HeaderHook hook() {
    return [this](InferRequest& r) {
      ++calls;
      if (!refuse.ok()) return refuse;
      if (!place) return absl::OkStatus();
      size_t at = 0;
      for (auto& t : r.inputs) {
        t.slot = arena.data() + at;
        at += t.slot_bytes;
      }
      return absl::OkStatus();
    };
  }
};

std::string bytesOf(const backends::Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.bytes()), t.byteSize());
}

void expectSame(const absl::Status& ws, const InferRequest& w, const absl::Status& ss,
                const InferRequest& s, const std::string& where) {
  ASSERT_EQ(ws.code(), ss.code()) << where << ": " << ws << " vs " << ss;
  ASSERT_EQ(ws.message(), ss.message()) << where;
  if (!ws.ok()) return;
  EXPECT_EQ(w.model_name, s.model_name) << where;
  EXPECT_EQ(w.model_version, s.model_version) << where;
  EXPECT_EQ(w.id, s.id) << where;
  EXPECT_EQ(w.priority, s.priority) << where;
  EXPECT_EQ(w.timeout_us, s.timeout_us) << where;
  ASSERT_EQ(w.outputs.size(), s.outputs.size()) << where;
  for (size_t i = 0; i < w.outputs.size(); ++i) EXPECT_EQ(w.outputs[i].name, s.outputs[i].name);
  ASSERT_EQ(w.inputs.size(), s.inputs.size()) << where;
  for (size_t i = 0; i < w.inputs.size(); ++i) {
    EXPECT_EQ(w.inputs[i].name, s.inputs[i].name) << where;
    EXPECT_EQ(w.inputs[i].dtype, s.inputs[i].dtype) << where;
    EXPECT_EQ(w.inputs[i].shape, s.inputs[i].shape) << where;
    EXPECT_EQ(bytesOf(w.inputs[i]), bytesOf(s.inputs[i])) << where << " input " << i;
  }
}

// Feeds `wire` split at `cuts` (ascending offsets) through the streaming decoder.
absl::Status streamed(ModelInferStreamDecoder& d, std::string_view wire,
                      const std::vector<size_t>& cuts, const HeaderHook* hook, InferRequest& out,
                      bool copied = false, uint64_t* copied_bytes = nullptr) {
  d.begin(wire.size(), hook);
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(wire.size());
  for (size_t e : ends) {
    if (e < at) continue;
    // Each piece in its own buffer: nothing may read past a piece.
    const std::string piece(wire.substr(at, e - at));
    if (absl::Status st = d.piece(piece.data(), piece.size(), copied); !st.ok()) return st;
    at = e;
  }
  return d.finish(out, copied_bytes);
}

// Every single split and every split into three of a (small) message; both without a hook and
// with a placing one.
void checkEverySplit(const std::string& wire, bool three = true) {
  for (int placed = 0; placed < 2; ++placed) {
    ArenaHook wa, sa;
    const HeaderHook wh = wa.hook(), sh = sa.hook();
    InferRequest w;
    uint64_t wc = 0;
    const absl::Status ws = decodeModelInferRequest(wire, w, &wc, placed ? &wh : nullptr);
    ModelInferStreamDecoder d;
    for (size_t i = 0; i <= wire.size(); ++i) {
      InferRequest s;
      uint64_t sc = 0;
      const absl::Status ss = streamed(d, wire, {i}, placed ? &sh : nullptr, s, false, &sc);
      expectSame(ws, w, ss, s, "split at " + std::to_string(i));
      if (ws.ok()) {
        EXPECT_EQ(wc, sc) << i;
      }
      if (::testing::Test::HasFailure()) return;
      if (!three) continue;
      for (size_t j = i; j <= wire.size(); j += 1 + wire.size() / 64) {
        InferRequest s3;
        const absl::Status s3s = streamed(d, wire, {i, j}, placed ? &sh : nullptr, s3);
        expectSame(ws, w, s3s, s3, "split at " + std::to_string(i) + "," + std::to_string(j));
        if (::testing::Test::HasFailure()) return;
      }
    }
    // One byte at a time.
    std::vector<size_t> cuts;
    for (size_t i = 1; i < wire.size(); ++i) cuts.push_back(i);
    InferRequest s;
    expectSame(ws, w, streamed(d, wire, cuts, placed ? &sh : nullptr, s), s, "bytewise");
  }
}

inference::ModelInferRequest rawRequest() {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  m.set_model_version("1");
  m.set_id("req-7");
  (*m.mutable_parameters())["priority"].set_int64_param(2);
  (*m.mutable_parameters())["timeout"].set_int64_param(5000);
  const std::vector<std::pair<const char*, int>> ins = {{"A", 3}, {"B", 1}, {"C", 5}};
  for (const auto& [name, n] : ins) {
    auto* in = m.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(n);
    std::string b(4 * n, '\0');
    for (int k = 0; k < n; ++k) {
      const float v = static_cast<float>(k) + name[0];
      std::memcpy(b.data() + 4 * k, &v, 4);
    }
    m.add_raw_input_contents(b);
  }
  m.add_outputs()->set_name("OUT_A");
  m.add_outputs()->set_name("OUT_C");
  return m;
}

TEST(GrpcInferStream, RawInputsEverySplitPoint) {
  checkEverySplit(rawRequest().SerializeAsString());
}

TEST(GrpcInferStream, TypedContentsEverySplitPoint) {
  inference::ModelInferRequest m;
  m.set_model_name("identity");
  auto* a = m.add_inputs();
  a->set_name("I32");
  a->set_datatype("INT32");
  a->add_shape(4);
  for (int v : {1, -2, 300, 70000}) a->mutable_contents()->add_int_contents(v);
  auto* b = m.add_inputs();
  b->set_name("S");
  b->set_datatype("BYTES");
  b->add_shape(2);
  b->mutable_contents()->add_bytes_contents("hello");
  b->mutable_contents()->add_bytes_contents("");
  auto* c = m.add_inputs();
  c->set_name("F");
  c->set_datatype("FP64");
  c->add_shape(2);
  c->mutable_contents()->add_fp64_contents(1.5);
  c->mutable_contents()->add_fp64_contents(-2.25);
  m.add_outputs()->set_name("I32");
  checkEverySplit(m.SerializeAsString());
}

TEST(GrpcInferStream, OutputsAfterInputsAndUnknownFieldsBeforeRaws) {
  inference::ModelInferRequest m = rawRequest();
  std::string wire = m.SerializeAsString();
  // An unknown varint field and an unknown length-delimited field before the raw contents
  // (protobuf serialises raw_input_contents, field 7, last).
  const size_t first_raw = wire.find(static_cast<char>(0x3a), wire.rfind("OUT_C"));
  ASSERT_NE(first_raw, std::string::npos);
  std::string extra;
  protowire::putVarintField(extra, 99, 1ull << 40);
  protowire::putString(extra, 100, "unknown");
  wire.insert(first_raw, extra);
  checkEverySplit(wire);
}

TEST(GrpcInferStream, RawBytesGoStraightIntoSlotsAndAreCountedOnce) {
  const std::string wire = rawRequest().SerializeAsString();
  ArenaHook ah;
  const HeaderHook h = ah.hook();
  ModelInferStreamDecoder d;
  InferRequest r;
  uint64_t copied = 0;
  // Split inside the second raw entry's bytes; pieces delivered from a transport copy.
  const size_t cut = wire.size() - 30;
  ASSERT_TRUE(streamed(d, wire, {cut}, &h, r, /*copied=*/true, &copied).ok());
  EXPECT_EQ(ah.calls, 1);
  EXPECT_EQ(d.streamedMessages(), 1u);
  EXPECT_EQ(d.fallbacks(), 0u);
  EXPECT_EQ(d.gatheredBytes(), 0u);
  EXPECT_EQ(copied, 36u);               // (3 + 1 + 5) FP32 elements, written once
  EXPECT_EQ(r.received_copy_bytes, 36u);  // all of them delivered from a copy
  ASSERT_EQ(r.inputs.size(), 3u);
  size_t at = 0;
  for (const auto& t : r.inputs) {
    EXPECT_EQ(t.slot, ah.arena.data() + at);
    EXPECT_TRUE(t.data.empty());
    at += t.slot_bytes;
  }
  EXPECT_EQ(ah.arena[at], 0xEE);  // nothing written past the slots
  const auto c = le<float>({67.f, 68.f, 69.f, 70.f, 71.f});
  EXPECT_EQ(bytesOf(r.inputs[2]), std::string(c.begin(), c.end()));

  // Not from a copy: nothing counted before the decoder's write.
  InferRequest r2;
  ASSERT_TRUE(streamed(d, wire, {cut}, &h, r2, false).ok());
  EXPECT_EQ(r2.received_copy_bytes, 0u);
}

TEST(GrpcInferStream, RefusedBeforeCopying) {
  const std::string wire = rawRequest().SerializeAsString();
  ArenaHook ah;
  ah.refuse = absl::UnavailableError("queue full");
  const HeaderHook h = ah.hook();
  ModelInferStreamDecoder d;
  d.begin(wire.size(), &h);
  const size_t first_raw = wire.find(static_cast<char>(0x3a), wire.rfind("OUT_C"));
  // The first piece ends inside the first raw entry: the hook refuses there.
  const absl::Status st = d.piece(wire.data(), first_raw + 4, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ah.calls, 1);
  // The rest is ignored, unread; nothing was written.
  EXPECT_EQ(d.piece(wire.data() + first_raw + 4, wire.size() - first_raw - 4, false).code(),
            absl::StatusCode::kUnavailable);
  InferRequest r;
  EXPECT_EQ(d.finish(r).code(), absl::StatusCode::kUnavailable);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(ah.arena[i], 0xEE);
  EXPECT_EQ(d.bufferedBytes(), 0u);
}

TEST(GrpcInferStream, ReorderedFieldsFallBackCounted) {
  // inputs (field 5) after the raw contents: legal protobuf, gathered and decoded whole.
  inference::ModelInferRequest m = rawRequest();
  std::string wire = m.SerializeAsString();
  inference::ModelInferRequest extra;
  auto* in = extra.add_inputs();
  in->set_name("D");
  in->set_datatype("FP32");
  in->add_shape(1);
  extra.add_raw_input_contents(std::string(4, '\x01'));
  wire += extra.SerializeAsString();
  checkEverySplit(wire, /*three=*/false);
  ModelInferStreamDecoder d;
  InferRequest r;
  ArenaHook ah;
  const HeaderHook h = ah.hook();
  ASSERT_TRUE(streamed(d, wire, {wire.size() / 2}, &h, r).ok());
  EXPECT_EQ(d.fallbacks(), 1u);
  EXPECT_GT(d.gatheredBytes(), 0u);
  EXPECT_EQ(r.received_copy_bytes, 40u);  // every tensor byte went through the gather
  EXPECT_EQ(r.inputs.size(), 4u);

  // An output after the raw contents: same.
  std::string wire2 = rawRequest().SerializeAsString();
  protowire::putString(wire2, 6, std::string("\x0a\x01X", 3));
  checkEverySplit(wire2, false);
}

TEST(GrpcInferStream, SizeMismatchAndCountMismatchMatchTheWholeDecoder) {
  // A raw entry larger than its shape says, and fewer/more raw entries than inputs.
  inference::ModelInferRequest m = rawRequest();
  m.set_raw_input_contents(1, std::string(8, '\0'));
  checkEverySplit(m.SerializeAsString(), false);
  inference::ModelInferRequest fewer = rawRequest();
  fewer.mutable_raw_input_contents()->RemoveLast();
  checkEverySplit(fewer.SerializeAsString(), false);
  inference::ModelInferRequest more = rawRequest();
  more.add_raw_input_contents("abcd");
  checkEverySplit(more.SerializeAsString(), false);
  inference::ModelInferRequest bytes_raw = rawRequest();
  bytes_raw.mutable_inputs(0)->set_datatype("BYTES");
  checkEverySplit(bytes_raw.SerializeAsString(), false);
  inference::ModelInferRequest unknown = rawRequest();
  unknown.mutable_inputs(2)->set_datatype("FP33");
  checkEverySplit(unknown.SerializeAsString(), false);
}

TEST(GrpcInferStream, HostileLengths) {
  std::string head;
  protowire::putString(head, 1, "identity");
  {
    inference::ModelInferRequest m;
    auto* in = m.add_inputs();
    in->set_name("A");
    in->set_datatype("UINT8");
    in->add_shape(4);
    head += m.SerializeAsString();
  }
  std::vector<std::string> wires;
  // A raw length past the message's end (and over 4 GiB, kept to 32 bits as protobuf does).
  wires.push_back(head + "\x3a\xff\xff\xff\x0f" + "abcd");
  wires.push_back(head + "\x3a\x84\x80\x80\x80\x10" + "abcd");  // 2^32 + 4 -> 4
  // A 10-byte length varint, and an 11-byte one.
  wires.push_back(head + "\x3a\x84\x80\x80\x80\x80\x80\x80\x80\x80\x00" + "abcd");
  wires.push_back(head + "\x3a\x84\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00" + "abcd");
  // A 10-byte key after the raw entry, an 11-byte one; a zero key; a key cut at the end.
  wires.push_back(head + "\x3a\x04" + "abcd" + "\xba\x80\x80\x80\x80\x80\x80\x80\x80\x00\x00");
  wires.push_back(head + "\x3a\x04" + "abcd" + "\xba\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00");
  wires.push_back(head + "\x3a\x04" + "abcd" + std::string(1, '\0'));
  wires.push_back(head + "\x3a\x04" + "abcd" + "\xba");
  // Unknown wire types before and after the raw entry; an end-group key; a length cut.
  wires.push_back(head + "\xfe\x01" + "\x3a\x04" + "abcd");
  wires.push_back(head + "\x3a\x04" + "abcd" + "\xff\x01");
  wires.push_back(head + "\x3a\x04" + "abcd" + "\x0c");
  wires.push_back(head + "\x3a\x84");
  // A nested length (an inputs entry) past the message's end.
  wires.push_back(std::string("\x2a\xff\xff\x03") + "\x0a\x01" + "A");
  // A shape whose byte size overflows, with a raw entry.
  {
    inference::ModelInferRequest m;
    auto* in = m.add_inputs();
    in->set_name("A");
    in->set_datatype("FP64");
    in->add_shape(1ll << 40);
    in->add_shape(1ll << 40);
    m.add_raw_input_contents("abcdefgh");
    wires.push_back(m.SerializeAsString());
  }
  // A shape announcing more bytes than the message has.
  {
    inference::ModelInferRequest m;
    auto* in = m.add_inputs();
    in->set_name("A");
    in->set_datatype("UINT8");
    in->add_shape(1 << 30);
    m.add_raw_input_contents("abcdefgh");
    wires.push_back(m.SerializeAsString());
  }
  for (const std::string& w : wires) checkEverySplit(w, false);
}

TEST(GrpcInferStream, LargeHeaderFallsBackBounded) {
  inference::ModelInferRequest m = rawRequest();
  m.set_id(std::string(100000, 'x'));  // a header over the 64 KiB bound
  const std::string wire = m.SerializeAsString();
  ModelInferStreamDecoder d;
  std::vector<size_t> cuts;
  for (size_t at = 16384; at < wire.size(); at += 16384) cuts.push_back(at);
  InferRequest r;
  d.begin(wire.size(), nullptr);
  size_t at = 0, peak = 0;
  cuts.push_back(wire.size());
  for (size_t e : cuts) {
    ASSERT_TRUE(d.piece(wire.data() + at, e - at, false).ok());
    peak = std::max(peak, d.bufferedBytes());
    at = e;
  }
  ASSERT_TRUE(d.finish(r).ok());
  EXPECT_EQ(d.fallbacks(), 1u);
  EXPECT_LE(peak, 2 * wire.size());
  EXPECT_EQ(r.id.size(), 100000u);
  EXPECT_EQ(r.received_copy_bytes, 36u);
}

TEST(GrpcInferStream, OnePieceIsDecodedInPlace) {
  const std::string wire = rawRequest().SerializeAsString();
  ModelInferStreamDecoder d;
  InferRequest r;
  ASSERT_TRUE(streamed(d, wire, {}, nullptr, r).ok());
  EXPECT_EQ(d.gatheredBytes(), 0u);
  EXPECT_EQ(d.fallbacks(), 0u);
  EXPECT_EQ(r.received_copy_bytes, 0u);
  EXPECT_EQ(r.inputs.size(), 3u);
}

}  // namespace
}  // namespace infergate::frontend
