#pragma once
// What the frontend fuzz targets share: a reader over the fuzzer's bytes, an invariant check
// that aborts (libFuzzer keeps the input), the in-process models the requests are served by,
// and an input placer that gives every input a heap block of exactly its size (so a decoder
// that writes past what it announced is caught by ASan at the byte).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/identity_model.h"
#include "backends/model.h"
#include "backends/tensor.h"
#include "spdlog/spdlog.h"

#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

namespace infergate::fuzz {

// The gateway's log lines are not findings, and writing them slows every execution.
inline const bool kQuietLogs = [] {
  spdlog::set_level(spdlog::level::off);
  return true;
}();

// Consumes the fuzzer's bytes front to back; past the end every read yields zeros / empty.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  bool empty() const { return left_ == 0; }
  size_t left() const { return left_; }
  uint8_t u8() {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  std::string_view bytes(size_t n) {
    n = n < left_ ? n : left_;
    std::string_view v(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return v;
  }
  std::string_view rest() { return bytes(left_); }

 private:
  const uint8_t* p_;
  size_t left_;
};

// The models every frontend target serves, all identity (answers inline, deterministic):
//   "m" v1: FP32 x [3], max_batch_size 8 (the TF Serving REST tests' model)
//   "two" v2: INT32 a [2] + BYTES s [1], max_batch_size 4
//   "identity" v1: FP32 INPUT0 [16], max_batch_size 8 (the embedded default config)
//   "all" v1, no batching: FP16 h [2,2], BF16 b [-1], BOOL t [1], UINT64 u [-1], INT8 i [-1],
//     FP64 d [-1], UINT8 c [-1,-1]
//   "s" v1: BYTES s [-1], no batching
inline std::vector<backends::ModelConfig> fuzzModelConfigs() {
  using backends::DataType;
  std::vector<backends::ModelConfig> out;
  auto add = [&](std::string name, std::string version, int max_batch,
                 std::vector<backends::TensorSpec> ins) {
    backends::ModelConfig c;
    c.name = std::move(name);
    c.version = std::move(version);
    c.max_batch_size = max_batch;
    c.inputs = ins;
    for (auto& s : ins) s.name += "_out";
    c.outputs = std::move(ins);
    out.push_back(std::move(c));
  };
  add("m", "1", 8, {{"x", DataType::kFp32, {3}}});
  add("two", "2", 4, {{"a", DataType::kInt32, {2}}, {"s", DataType::kBytes, {1}}});
  add("identity", "1", 8, {{"INPUT0", DataType::kFp32, {16}}});
  add("all", "1", 0,
      {{"h", DataType::kFp16, {2, 2}},
       {"b", DataType::kBf16, {-1}},
       {"t", DataType::kBool, {1}},
       {"u", DataType::kUint64, {-1}},
       {"i", DataType::kInt8, {-1}},
       {"d", DataType::kFp64, {-1}},
       {"c", DataType::kUint8, {-1, -1}}});
  add("s", "1", 0, {{"s", DataType::kBytes, {-1}}});
  return out;
}

inline void addFuzzModels(backends::ModelRegistry& registry) {
  for (auto& c : fuzzModelConfigs()) {
    registry.add(std::make_unique<backends::IdentityModel>(std::move(c)));
  }
}

// One heap block per input, exactly Tensor::slot_bytes long (at least 1 byte, so an empty slot
// is a valid pointer ASan still guards).
class HeapSlots : public backends::InputSlots {
 public:
  std::vector<std::unique_ptr<uint8_t[]>> blocks;
};

// Places every input when `enabled` (the one-copy path of a batched model), else refuses.
inline backends::InputPlacer heapPlacer(bool enabled) {
  return [enabled](backends::InferRequest& r) {
    if (!enabled) return false;
    auto slots = std::make_shared<HeapSlots>();
    for (auto& t : r.inputs) {
      slots->blocks.emplace_back(new uint8_t[t.slot_bytes ? t.slot_bytes : 1]);
      t.slot = slots->blocks.back().get();
    }
    r.slots = std::move(slots);
    return true;
  };
}

// Bytes of a request's tensors, placed or not.
inline size_t tensorBytes(const backends::InferRequest& r) {
  size_t n = 0;
  for (const auto& t : r.inputs) n += t.byteSize();
  return n;
}

}  // namespace infergate::fuzz
