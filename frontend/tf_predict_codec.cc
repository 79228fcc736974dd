#include "frontend/tf_predict_codec.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "common/checked.h"
#include "common/protowire.h"
#include "frontend/streamed_tensor.h"
#include "simdjson.h"

namespace infergate::frontend {
namespace {

using backends::DataType;
namespace protowire = common::protowire;
using protowire::kFixed32;
using protowire::kFixed64;
using protowire::kLen;
using protowire::kVarint;

absl::Status parseError() {
  return absl::InvalidArgumentError("failed to parse PredictRequest");
}

// proto3 `string` fields are UTF-8 checked by libprotobuf's parser (a failure fails the parse).
bool utf8(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

// The PredictRequest reader, with the exact acceptance rules of the libprotobuf the former
// decode used (3.21's parser; common/protowire.h is laxer on two points): a key is at most 5
// bytes (its low 32 bits), a length at most 5 bytes and below 2^31 - 16; a zero key, field
// number 0, wire types 6 and 7, and an end-group key outside its group fail the parse; groups
// (skipped as unknown fields) nest to a depth of 100 counting the messages around them.
class Input {
 public:
  explicit Input(std::string_view s, int level = 0)
      : p_(reinterpret_cast<const uint8_t*>(s.data())), end_(p_ + s.size()), level_(level) {}

  bool atEnd() const { return p_ >= end_; }
  // The next key of this message; 0 at its end (consumedEntireMessage()) or when malformed.
  uint32_t readTag() {
    if (p_ >= end_) {
      clean_end_ = true;
      return 0;
    }
    uint32_t tag = 0;
    if (!readKey(tag)) return 0;
    const uint32_t wt = protowire::tagWireType(tag);
    if (wt == protowire::kEndGroup || wt > kFixed32 || protowire::tagField(tag) == 0) return 0;
    return tag;
  }
  bool consumedEntireMessage() const { return clean_end_; }

  bool readVarint(uint64_t& v) {  // up to 10 bytes, modulo 2^64
    v = 0;
    for (int i = 0; i < 10 && p_ < end_; ++i) {
      const uint8_t b = *p_++;
      v |= uint64_t{b & 0x7fu} << (7 * i);
      if (b < 0x80) return true;
    }
    return false;
  }
  bool readFixed32(uint32_t& v) {
    if (end_ - p_ < 4) return false;
    std::memcpy(&v, p_, 4);  // little-endian host
    p_ += 4;
    return true;
  }
  bool readFixed64(uint64_t& v) {
    if (end_ - p_ < 8) return false;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return true;
  }
  bool readView(std::string_view& out) {
    uint32_t len = 0;
    int i = 0;
    for (;; ++i) {
      if (i == 5 || p_ >= end_) return false;
      const uint8_t b = *p_++;
      if (i == 4 && b >= 8) return false;  // 2 GiB or more
      len |= uint32_t{b & 0x7fu} << (7 * i);
      if (b < 0x80) break;
    }
    if (len > INT32_MAX - 16 || len > static_cast<size_t>(end_ - p_)) return false;
    out = std::string_view(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return true;
  }
  // Skips the payload of the field whose key `tag` (from readTag) was just read.
  bool skipField(uint32_t tag) { return skip(tag, level_); }

 private:
  bool readKey(uint32_t& tag) {
    tag = 0;
    for (int i = 0; i < 5 && p_ < end_; ++i) {
      const uint8_t b = *p_++;
      tag |= static_cast<uint32_t>(b & 0x7fu) << (7 * i);  // bits past 32 dropped
      if (b < 0x80) return tag != 0;
    }
    return false;
  }
  bool skip(uint32_t tag, int level) {
    uint64_t v = 0;
    std::string_view view;
    switch (protowire::tagWireType(tag)) {
      case kVarint: return readVarint(v);
      case kFixed64: return readFixed64(v);
      case kLen: return readView(view);
      case kFixed32: {
        uint32_t x = 0;
        return readFixed32(x);
      }
      case protowire::kStartGroup: {
        if (level + 1 > 100) return false;
        const uint32_t field = protowire::tagField(tag);
        for (;;) {
          uint32_t inner = 0;
          if (!readKey(inner)) return false;
          const uint32_t wt = protowire::tagWireType(inner);
          if (wt == protowire::kEndGroup) return protowire::tagField(inner) == field;
          if (wt > kFixed32 || protowire::tagField(inner) == 0) return false;
          if (!skip(inner, level + 1)) return false;
        }
      }
      default: return false;
    }
  }
  const uint8_t* p_;
  const uint8_t* end_;
  int level_;
  bool clean_end_ = false;
};

// TensorProto's repeated value fields: field number and the wire type of one unpacked element,
// in TfTensorView::values order; then scomplex_val / dcomplex_val (checked, not kept).
struct ValueField {
  uint32_t field;
  uint32_t wire_type;
};
constexpr ValueField kValueFields[] = {
    {13, kVarint},  {5, kFixed32},  {6, kFixed64}, {7, kVarint}, {8, kLen},
    {10, kVarint},  {11, kVarint},  {16, kVarint}, {17, kVarint},
    {9, kFixed32},  {12, kFixed64}};
constexpr int kHalf = 0, kFloat = 1, kDouble = 2, kInt = 3, kString = 4, kInt64 = 5, kBool = 6,
              kUint32 = 7, kUint64 = 8;
constexpr int kKeptValueFields = 9;

int valueFieldIndex(uint32_t f) {
  for (int i = 0; i < static_cast<int>(std::size(kValueFields)); ++i) {
    if (kValueFields[i].field == f) return i;
  }
  return -1;
}

bool readElement(Input& in, uint32_t wt, uint64_t& bits) {
  if (wt == kVarint) return in.readVarint(bits);
  if (wt == kFixed32) {
    uint32_t v = 0;
    if (!in.readFixed32(v)) return false;
    bits = v;
    return true;
  }
  return in.readFixed64(bits);
}

// Elements of a packed run of wire type `wt`; nullopt when malformed (a fixed-size run whose
// length is no multiple of the element, a truncated varint): libprotobuf fails the parse then.
std::optional<uint64_t> packedCount(std::string_view packed, uint32_t wt) {
  if (wt == kFixed32 || wt == kFixed64) {
    const size_t w = wt == kFixed32 ? 4 : 8;
    if (packed.size() % w != 0) return std::nullopt;
    return packed.size() / w;
  }
  uint64_t n = 0;
  Input pin(packed);
  while (!pin.atEnd()) {
    uint64_t v = 0;
    if (!pin.readVarint(v)) return std::nullopt;
    ++n;
  }
  return n;
}

bool scanDim(std::string_view v, int64_t& size) {
  Input in(v, 4);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if (f == 1 && wt == kVarint) {
      uint64_t d = 0;
      if (!in.readVarint(d)) return false;
      size = static_cast<int64_t>(d);
    } else if (f == 2 && wt == kLen) {
      std::string_view name;
      if (!in.readView(name) || !utf8(name)) return false;
    } else if (!in.skipField(tag)) {
      return false;
    }
  }
  return in.consumedEntireMessage();
}

bool scanShape(std::string_view v, std::vector<int64_t>& shape) {
  Input in(v, 3);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if (f == 2 && wt == kLen) {
      std::string_view dim;
      int64_t size = 0;
      if (!in.readView(dim) || !scanDim(dim, size)) return false;
      shape.push_back(size);
    } else if (f == 3 && wt == kVarint) {
      uint64_t unknown_rank = 0;
      if (!in.readVarint(unknown_rank)) return false;
    } else if (!in.skipField(tag)) {
      return false;
    }
  }
  return in.consumedEntireMessage();
}

// Reads the fields of one TensorProto into `t` (a recurring message merges into it).
bool scanTensor(std::string_view v, TfTensorView& t) {
  Input in(v, 2);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if ((f == 1 || f == 3) && wt == kVarint) {  // dtype, version_number
      uint64_t x = 0;
      if (!in.readVarint(x)) return false;
      if (f == 1) t.dtype = static_cast<int32_t>(x);
      continue;
    }
    if (f == 2 && wt == kLen) {
      std::string_view shape;
      if (!in.readView(shape) || !scanShape(shape, t.shape)) return false;
      continue;
    }
    if (f == 4 && wt == kLen) {
      if (!in.readView(t.content)) return false;
      continue;
    }
    const int k = valueFieldIndex(f);
    if (k >= 0 && kValueFields[k].wire_type == kLen) {  // string_val: bytes, unpacked
      if (wt != kLen) {
        if (!in.skipField(tag)) return false;
        continue;
      }
      std::string_view element;
      if (!in.readView(element)) return false;
      ++t.counts[k];
      t.string_bytes = common::saturatingAdd(t.string_bytes, 4 + uint64_t{element.size()});
      continue;
    }
    if (k >= 0 && wt == kLen) {  // packed run
      std::string_view packed;
      if (!in.readView(packed)) return false;
      const std::optional<uint64_t> n = packedCount(packed, kValueFields[k].wire_type);
      if (!n) return false;
      if (k < kKeptValueFields) t.counts[k] += *n;
      continue;
    }
    if (k >= 0 && wt == kValueFields[k].wire_type) {  // one unpacked element
      uint64_t bits = 0;
      if (!readElement(in, wt, bits)) return false;
      if (k < kKeptValueFields) ++t.counts[k];
      continue;
    }
    if (!in.skipField(tag)) return false;  // unknown, or a known number of another wire type
  }
  return in.consumedEntireMessage();
}

bool scanModelSpec(std::string_view v, PredictModelSpec& spec, int64_t& version) {
  Input in(v, 1);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if ((f == 1 || f == 3 || f == 4) && wt == kLen) {
      std::string_view s;
      if (!in.readView(s) || !utf8(s)) return false;
      if (f == 1) {
        spec.name.assign(s);
      } else if (f == 3) {
        spec.signature_name.assign(s);
      } else {  // version_label: the oneof's other member
        spec.version_label.assign(s);
        spec.has_version = false;
      }
    } else if (f == 2 && wt == kLen) {  // google.protobuf.Int64Value, merged
      std::string_view w;
      if (!in.readView(w)) return false;
      if (!spec.has_version) {
        spec.has_version = true;
        spec.version_label.clear();
        version = 0;
      }
      Input win(w, 2);
      for (uint32_t wtag; (wtag = win.readTag()) != 0;) {
        if (wtag == protowire::makeTag(1, kVarint)) {
          uint64_t x = 0;
          if (!win.readVarint(x)) return false;
          version = static_cast<int64_t>(x);
        } else if (!win.skipField(wtag)) {
          return false;
        }
      }
      if (!win.consumedEntireMessage()) return false;
    } else if (!in.skipField(tag)) {
      return false;
    }
  }
  return in.consumedEntireMessage();
}

// One map entry: key (1) and value (2) in any order, recurring keys overwrite, recurring
// values merge (libprotobuf parses the entry as a message, then replaces the map's value).
bool scanEntry(std::string_view v, TfTensorView& t) {
  Input in(v, 1);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if (f == 1 && wt == kLen) {
      if (!in.readView(t.name) || !utf8(t.name)) return false;
    } else if (f == 2 && wt == kLen) {
      std::string_view value;
      if (!in.readView(value) || !scanTensor(value, t)) return false;
      t.messages.push_back(value);
    } else if (!in.skipField(tag)) {
      return false;
    }
  }
  return in.consumedEntireMessage();
}

// --- decoding ---------------------------------------------------------------------------------

// A single value broadcast over a shape (TF's version-0 rule) makes data that was never on the
// wire: at most this much of it.
constexpr uint64_t kMaxTfBroadcastBytes = 64ull << 20;

// The value field that carries dtype `t`, and the bytes of one element.
int valueFieldOf(DataType t) {
  switch (t) {
    case DataType::kFp32: return kFloat;
    case DataType::kFp64: return kDouble;
    case DataType::kInt32:
    case DataType::kInt16:
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kUint16: return kInt;
    case DataType::kInt64: return kInt64;
    case DataType::kBool: return kBool;
    case DataType::kFp16:
    case DataType::kBf16: return kHalf;
    case DataType::kUint32: return kUint32;
    case DataType::kUint64: return kUint64;
    case DataType::kBytes: return kString;
  }
  return kString;
}

// One element's raw wire bits as the dtype's storage, with the conversions libprotobuf's typed
// accessors and the former static_cast<Out>(value) made: int32 fields truncate the varint to 32
// bits, then to the element; bool is != 0; float/double keep their bits.
template <typename Tag>
void storeElement(uint64_t bits, uint8_t* dst) {
  using Out = typename Tag::Storage;
  Out v;
  if constexpr (Tag::kIsBool) {
    v = bits != 0 ? 1 : 0;
  } else if constexpr (Tag::value == DataType::kFp32) {
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&v, &b, 4);
  } else if constexpr (Tag::value == DataType::kFp64) {
    std::memcpy(&v, &bits, 8);
  } else if constexpr (Tag::value == DataType::kInt64 || Tag::value == DataType::kUint64) {
    v = static_cast<Out>(bits);
  } else if constexpr (Tag::value == DataType::kUint32) {
    v = static_cast<Out>(static_cast<uint32_t>(bits));
  } else {  // int_val / half_val: int32 fields
    v = static_cast<Out>(static_cast<int32_t>(bits));
  }
  std::memcpy(dst, &v, sizeof(Out));
}

// Calls f(bits) or, for a packed fixed-width run of the storage's width, run(bytes), for the
// elements of value field `k` in wire order, reading them again from the value's messages (the
// scan checked them); stops when f returns false.
template <typename F, typename Run>
void forEachElement(const TfTensorView& tv, int k, F&& f, Run&& run) {
  const uint32_t field = kValueFields[k].field, ewt = kValueFields[k].wire_type;
  for (std::string_view m : tv.messages) {
    Input in(m, 2);
    for (uint32_t tag; (tag = in.readTag()) != 0;) {
      const uint32_t wt = protowire::tagWireType(tag);
      if (protowire::tagField(tag) != field || (wt != kLen && wt != ewt)) {
        in.skipField(tag);
        continue;
      }
      if (wt == kLen) {  // a packed run, or one string_val element
        std::string_view packed;
        in.readView(packed);
        if (!run(packed)) return;
        continue;
      }
      uint64_t bits = 0;
      readElement(in, wt, bits);
      if (!f(bits)) return;
    }
  }
}

// Writes the `n` elements of the dtype's value field into `dst` (n == the field's count, or the
// broadcast count when it holds one value).
template <typename Tag>
void writeTyped(const TfTensorView& tv, uint64_t n, uint8_t* dst) {
  using Out = typename Tag::Storage;
  const int k = valueFieldOf(Tag::value);
  const uint32_t ewt = kValueFields[k].wire_type;
  const size_t width = ewt == kFixed32 ? 4 : 8;
  const bool raw = ewt != kVarint && width == sizeof(Out);  // packed runs are the slot's layout
  const auto unpack = [&](std::string_view packed, auto&& f) {
    Input pin(packed);
    while (!pin.atEnd()) {
      uint64_t bits = 0;
      readElement(pin, ewt, bits);
      if (!f(bits)) return false;
    }
    return true;
  };
  if (n != tv.counts[k]) {  // one value over the shape
    uint8_t one[sizeof(Out)];
    const auto first = [&](uint64_t bits) {
      storeElement<Tag>(bits, one);
      return false;
    };
    forEachElement(tv, k, first, [&](std::string_view p) { return unpack(p, first); });
    for (uint64_t i = 0; i < n; ++i) std::memcpy(dst + i * sizeof(Out), one, sizeof(Out));
    return;
  }
  const auto store = [&](uint64_t bits) {
    storeElement<Tag>(bits, dst);
    dst += sizeof(Out);
    return true;
  };
  forEachElement(tv, k, store, [&](std::string_view packed) {
    if (!raw) return unpack(packed, store);
    if (!packed.empty()) std::memcpy(dst, packed.data(), packed.size());  // one memcpy
    dst += packed.size();
    return true;
  });
}

// What the header pass decided for one input.
struct Plan {
  const TfTensorView* view = nullptr;
  bool content = false;  // tensor_content, else typed values
  uint64_t elements = 0; // typed: elements to write
};

// The header pass for one input: dtype, shape against the model, then its byte size; no value
// is read. Errors as the former tensorFromTf.
absl::Status planInput(const TfTensorView& tv, const backends::ModelConfig& cfg,
                       const backends::TensorSpec& spec, backends::Tensor& t, Plan& plan) {
  const std::string name(tv.name);
  const std::optional<DataType> dt = backends::fromTfDataType(tv.dtype);
  if (!dt) {
    return absl::InvalidArgumentError("input '" + name + "': unsupported dtype " +
                                      std::string(tfDataTypeName(tv.dtype)));
  }
  t.name = name;
  t.dtype = *dt;
  t.shape = tv.shape;
  if (absl::Status st = backends::checkInputShape(cfg, spec, t.dtype, t.shape); !st.ok()) {
    return st;
  }
  plan.view = &tv;
  if (!tv.content.empty() || tv.streamed_content != 0) {
    if (*dt == DataType::kBytes) {
      return absl::InvalidArgumentError("input '" + name + "': DT_STRING needs string_val");
    }
    plan.content = true;
    t.slot_bytes = tv.content.empty() ? tv.streamed_content : tv.content.size();
    return absl::OkStatus();
  }
  const int k = valueFieldOf(*dt);
  if (*dt == DataType::kBytes) {  // each element is at most 3x its >= 2 wire bytes: no overflow
    plan.elements = tv.counts[k];
    t.slot_bytes = tv.string_bytes;
    return absl::OkStatus();
  }
  const uint64_t count = backends::elementCount(t.shape).value_or(0);
  const uint64_t values = tv.counts[k];
  // TF's version-0 rule: a single value fills the whole shape.
  const uint64_t n = values == 1 && count > 1 ? count : values;
  uint64_t bytes = 0;
  if (!common::checkedMul<uint64_t>(n, backends::dataTypeSize(*dt), bytes) ||
      (n != values && bytes > kMaxTfBroadcastBytes)) {
    return absl::InvalidArgumentError("input '" + name + "': broadcasting one value over " +
                                      std::to_string(count) + " elements exceeds " +
                                      std::to_string(kMaxTfBroadcastBytes) + " bytes");
  }
  plan.elements = n;
  t.slot_bytes = bytes;
  return absl::OkStatus();
}

void writeInput(const Plan& plan, backends::Tensor& t) {
  const TfTensorView& tv = *plan.view;
  uint8_t* dst = t.mutableBytes();
  if (plan.content) {
    if (!tv.content.empty()) std::memcpy(dst, tv.content.data(), tv.content.size());
    return;
  }
  backends::visitDataType(t.dtype, [&](auto tag) {
    using Tag = decltype(tag);
    if constexpr (Tag::kIsBytes) {
      forEachElement(tv, kString, [](uint64_t) { return true; }, [&](std::string_view s) {
        const uint32_t len = static_cast<uint32_t>(s.size());
        std::memcpy(dst, &len, 4);
        if (len != 0) std::memcpy(dst + 4, s.data(), len);
        dst += 4 + size_t{len};
        return true;
      });
    } else {
      writeTyped<Tag>(tv, plan.elements, dst);
    }
  });
}

}  // namespace

std::string_view tfDataTypeName(int32_t dtype) {
  static constexpr std::string_view kNames[] = {
      "DT_INVALID", "DT_FLOAT",  "DT_DOUBLE",  "DT_INT32",    "DT_UINT8",      "DT_INT16",
      "DT_INT8",    "DT_STRING", "DT_COMPLEX64", "DT_INT64",  "DT_BOOL",       "DT_QINT8",
      "DT_QUINT8",  "DT_QINT32", "DT_BFLOAT16", "DT_QINT16",  "DT_QUINT16",    "DT_UINT16",
      "DT_COMPLEX128", "DT_HALF", "DT_RESOURCE", "DT_VARIANT", "DT_UINT32",    "DT_UINT64"};
  if (dtype < 0 || dtype >= static_cast<int32_t>(std::size(kNames))) return {};
  return kNames[dtype];
}

absl::Status scanPredictRequest(std::string_view wire, PredictRequestScan& out) {
  out = PredictRequestScan{};
  int64_t version = 0;
  constexpr size_t kIndexFrom = 16;
  std::unordered_map<std::string_view, size_t> index;  // key -> out.inputs, from kIndexFrom keys
  Input in(wire);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    std::string_view v;
    if (f == 1 && wt == kLen) {
      if (!in.readView(v) || !scanModelSpec(v, out.spec, version)) return parseError();
    } else if (f == 2 && wt == kLen) {
      if (!in.readView(v)) return parseError();
      TfTensorView entry;
      if (!scanEntry(v, entry)) return parseError();
      // The last entry of a key wins. Keys are indexed once there are many (a hostile message
      // of a million small entries must not cost a million squared comparisons).
      size_t at = out.inputs.size();
      if (!index.empty()) {
        if (auto it = index.find(entry.name); it != index.end()) at = it->second;
      } else {
        for (size_t i = 0; i < out.inputs.size(); ++i) {
          if (out.inputs[i].name == entry.name) at = i;
        }
      }
      if (at < out.inputs.size()) {
        out.inputs[at] = std::move(entry);
      } else {
        out.inputs.push_back(std::move(entry));
        if (!index.empty()) {
          index.emplace(out.inputs.back().name, at);
        } else if (out.inputs.size() == kIndexFrom) {
          for (size_t i = 0; i < out.inputs.size(); ++i) index.emplace(out.inputs[i].name, i);
        }
      }
    } else if (f == 3 && wt == kLen) {
      if (!in.readView(v) || !utf8(v)) return parseError();
      out.output_filter.push_back(v);
    } else if (!in.skipField(tag)) {
      return parseError();
    }
  }
  if (!in.consumedEntireMessage()) return parseError();
  if (out.spec.has_version) out.spec.version = std::to_string(version);
  return absl::OkStatus();
}

absl::Status decodePredictInputs(const PredictRequestScan& scan, const backends::ModelConfig& cfg,
                                 backends::InferRequest& out, const backends::InputPlacer* place,
                                 uint64_t* copied_bytes) {
  out.protocol = net::Protocol::kGrpcTfServing;
  out.model_name = scan.spec.name;
  out.model_version = scan.spec.version;
  out.binary_data_output = true;
  out.received_copy_bytes = 0;  // the message bytes are what was received
  // Header pass. Map order is unspecified on the wire; present inputs in the model's order.
  Plan plans[16];
  std::vector<Plan> more;
  auto planAt = [&](size_t i) -> Plan& { return i < 16 ? plans[i] : more[i - 16]; };
  out.inputs.reserve(cfg.inputs.size());
  for (const backends::TensorSpec& spec : cfg.inputs) {
    const TfTensorView* tv = nullptr;
    for (const TfTensorView& e : scan.inputs) {
      if (e.name == spec.name) tv = &e;
    }
    if (tv == nullptr) continue;
    if (out.inputs.size() >= 16) more.emplace_back();
    backends::Tensor& t = out.inputs.emplace_back();
    if (absl::Status st = planInput(*tv, cfg, spec, t, planAt(out.inputs.size() - 1));
        !st.ok()) {
      return st;
    }
  }
  for (const TfTensorView& e : scan.inputs) {
    bool known = false;
    for (const backends::TensorSpec& spec : cfg.inputs) known = known || spec.name == e.name;
    if (!known) {
      return absl::InvalidArgumentError("input '" + std::string(e.name) +
                                        "' is not an input of model '" + scan.spec.name + "'");
    }
  }
  for (std::string_view f : scan.output_filter) out.outputs.push_back({std::string(f), true});
  // Place, then the write pass: each tensor byte once, from the message into the slot.
  const bool placed = place != nullptr && *place && !out.inputs.empty() && (*place)(out);
  uint64_t copied = 0;
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    backends::Tensor& t = out.inputs[i];
    if (planAt(i).view->streamed_content != 0) {
      // Its bytes come after this (PredictStreamDecoder): an unplaced tensor grows as they
      // arrive (frontend/streamed_tensor.h), never sized from the announced length.
      streamed::begin(t);
      continue;
    }
    if (!placed) {
      t.data.resize(t.slot_bytes);
      t.slot_bytes = 0;
    }
    copied += t.byteSize();
    writeInput(planAt(i), t);
  }
  if (copied_bytes != nullptr) *copied_bytes = copied;
  return absl::OkStatus();
}

}  // namespace infergate::frontend
