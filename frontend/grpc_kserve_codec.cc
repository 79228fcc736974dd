#include "frontend/grpc_kserve_codec.h"

#include <cstring>
#include <limits>
#include <vector>

#include "common/protowire.h"
#include "frontend/grpc_framing.h"

namespace infergate::frontend {
namespace {

using backends::DataType;
namespace protowire = common::protowire;
using protowire::kFixed32;
using protowire::kFixed64;
using protowire::kLen;
using protowire::kVarint;

absl::Status bad(std::string_view what) {
  return absl::InvalidArgumentError("malformed ModelInferRequest: " + std::string(what));
}

// InferParameter: the one value of its oneof, as int64/uint64/bool/string/double.
struct Param {
  uint32_t field = 0;
  uint64_t u = 0;  // bool_param, int64_param, uint64_param (raw varint)
  std::string_view s;  // string_param (field 3)
};

absl::Status parseParamEntry(std::string_view entry, std::string_view& key, Param& value) {
  protowire::Input in(entry);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if (f == 1 && wt == kLen) {
      if (!in.readView(key)) return bad("truncated parameter name");
    } else if (f == 2 && wt == kLen) {
      std::string_view pv;
      if (!in.readView(pv)) return bad("truncated parameter value");
      protowire::Input pin(pv);
      for (uint32_t ptag; (ptag = pin.readTag()) != 0;) {
        const uint32_t pf = protowire::tagField(ptag);
        if ((pf == 1 || pf == 2 || pf == 5) && (ptag & 7) == kVarint) {
          value.field = pf;
          if (!pin.readVarint(value.u)) return bad("truncated parameter varint");
        } else if (pf == 3 && (ptag & 7) == kLen) {
          value.field = pf;
          if (!pin.readView(value.s)) return bad("truncated parameter string");
        } else {
          if (pf >= 1 && pf <= 5) value.field = pf;
          if (!pin.skipField(ptag)) return bad("broken parameter value");
        }
      }
      if (!pin.consumedEntireMessage()) return bad("broken parameter value");
    } else if (!in.skipField(tag)) {
      return bad("broken parameter entry");
    }
  }
  return absl::OkStatus();
}

struct InputView {
  std::string_view name, datatype, contents;
  bool has_contents = false;
  std::vector<int64_t> shape;
};

absl::Status parseInput(std::string_view v, InputView& out) {
  protowire::Input in(v);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    switch (f) {
      case 1:
      case 2:
        if (wt != kLen) return bad("inputs.name/datatype must be length-delimited");
        if (!in.readView(f == 1 ? out.name : out.datatype)) return bad("truncated input field");
        break;
      case 3:
        if (wt == kVarint) {
          uint64_t d = 0;
          if (!in.readVarint(d)) return bad("truncated inputs.shape varint");
          out.shape.push_back(static_cast<int64_t>(d));
        } else if (wt == kLen) {
          std::string_view packed;
          if (!in.readView(packed)) return bad("truncated inputs.shape");
          protowire::Input pin(packed);
          while (!pin.atEnd()) {
            uint64_t d = 0;
            if (!pin.readVarint(d)) return bad("truncated inputs.shape varint");
            out.shape.push_back(static_cast<int64_t>(d));
          }
        } else {
          return bad("inputs.shape has the wrong wire type");
        }
        break;
      case 5:
        if (wt != kLen) return bad("inputs.contents must be length-delimited");
        if (!in.readView(out.contents)) return bad("truncated inputs.contents");
        out.has_contents = true;
        break;
      default:
        if (!in.skipField(tag)) return bad("broken field in inputs");
    }
  }
  if (!in.consumedEntireMessage()) return bad("broken inputs entry");
  return absl::OkStatus();
}

// The InferTensorContents field that carries `t`; 0 when none may (FP16/BF16: raw only).
uint32_t contentsFieldFor(DataType t) {
  switch (t) {
    case DataType::kBool: return 1;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32: return 2;
    case DataType::kInt64: return 3;
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32: return 4;
    case DataType::kUint64: return 5;
    case DataType::kFp32: return 6;
    case DataType::kFp64: return 7;
    case DataType::kBytes: return 8;
    default: return 0;
  }
}

constexpr const char* kContentsNames[] = {"",           "bool_contents",   "int_contents",
                                          "int64_contents", "uint_contents", "uint64_contents",
                                          "fp32_contents",  "fp64_contents", "bytes_contents"};

// Where typed elements go: `p` (a slot or Tensor::data sized by a first pass), or nowhere
// (p == nullptr: the measuring pass, which counts the bytes the elements take).
struct ElemOut {
  uint8_t* p = nullptr;
  size_t n = 0;
  void put(const void* b, size_t len) {
    if (p != nullptr && len != 0) std::memcpy(p + n, b, len);
    n += len;
  }
};

template <typename T>
void appendLe(ElemOut& data, T v) {
  data.put(&v, sizeof(T));
}

// One scalar element (already read as raw varint/fixed bits) into `data`.
absl::Status appendElement(DataType t, uint64_t bits, ElemOut& data,
                           std::string_view input) {
  auto range = [&](const char* type) {
    return absl::InvalidArgumentError("input '" + std::string(input) + "': value out of range for " +
                                      type);
  };
  switch (t) {
    case DataType::kBool: appendLe<uint8_t>(data, bits != 0 ? 1 : 0); break;
    case DataType::kInt8: {
      const int32_t v = static_cast<int32_t>(bits);
      if (v < -128 || v > 127) return range("INT8");
      appendLe<int8_t>(data, static_cast<int8_t>(v));
      break;
    }
    case DataType::kInt16: {
      const int32_t v = static_cast<int32_t>(bits);
      if (v < -32768 || v > 32767) return range("INT16");
      appendLe<int16_t>(data, static_cast<int16_t>(v));
      break;
    }
    case DataType::kInt32: appendLe<int32_t>(data, static_cast<int32_t>(bits)); break;
    case DataType::kInt64: appendLe<int64_t>(data, static_cast<int64_t>(bits)); break;
    case DataType::kUint8:
      if (static_cast<uint32_t>(bits) > 255) return range("UINT8");
      appendLe<uint8_t>(data, static_cast<uint8_t>(bits));
      break;
    case DataType::kUint16:
      if (static_cast<uint32_t>(bits) > 65535) return range("UINT16");
      appendLe<uint16_t>(data, static_cast<uint16_t>(bits));
      break;
    case DataType::kUint32: appendLe<uint32_t>(data, static_cast<uint32_t>(bits)); break;
    case DataType::kUint64: appendLe<uint64_t>(data, bits); break;
    case DataType::kFp32: appendLe<uint32_t>(data, static_cast<uint32_t>(bits)); break;
    case DataType::kFp64: appendLe<uint64_t>(data, bits); break;
    default: break;
  }
  return absl::OkStatus();
}

// The wire type of one unpacked element of contents field `f`.
uint32_t elementWireType(uint32_t f) { return f == 6 ? kFixed32 : f == 7 ? kFixed64 : kVarint; }

bool readElement(protowire::Input& in, uint32_t wt, uint64_t& bits) {
  if (wt == kVarint) return in.readVarint(bits);
  if (wt == kFixed32) {
    uint32_t v = 0;
    if (!in.readFixed32(v)) return false;
    bits = v;
    return true;
  }
  return in.readFixed64(bits);
}

absl::Status decodeContents(const InputView& iv, DataType t, ElemOut& data) {
  const uint32_t want = contentsFieldFor(t);
  const std::string input(iv.name);
  if (want == 0) {
    return absl::InvalidArgumentError("input '" + input + "': datatype " +
                                      std::string(backends::dataTypeName(t)) +
                                      " must be sent in raw_input_contents");
  }
  protowire::Input in(iv.contents);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if (f < 1 || f > 8) {
      if (!in.skipField(tag)) return bad("broken field in contents");
      continue;
    }
    if (f != want) {
      return absl::InvalidArgumentError(
          "input '" + input + "': contents." + kContentsNames[f] + " given for datatype " +
          std::string(backends::dataTypeName(t)) + " (expected " + kContentsNames[want] + ")");
    }
    if (f == 8) {
      std::string_view b;
      if (wt != kLen || !in.readView(b)) return bad("broken bytes_contents");
      appendLe<uint32_t>(data, static_cast<uint32_t>(b.size()));
      data.put(b.data(), b.size());
      continue;
    }
    const uint32_t ewt = elementWireType(f);
    if (wt == kLen) {  // packed
      std::string_view packed;
      if (!in.readView(packed)) return bad(std::string("truncated ") + kContentsNames[f]);
      if (ewt == kFixed32 || ewt == kFixed64) {
        const size_t w = ewt == kFixed32 ? 4 : 8;
        if (packed.size() % w != 0) return bad(std::string("truncated ") + kContentsNames[f]);
        // Little-endian fixed-width elements are already our layout: one copy.
        data.put(packed.data(), packed.size());
        continue;
      }
      protowire::Input pin(packed);
      while (!pin.atEnd()) {
        uint64_t bits = 0;
        if (!pin.readVarint(bits)) return bad(std::string("truncated varint in ") + kContentsNames[f]);
        if (absl::Status st = appendElement(t, bits, data, iv.name); !st.ok()) return st;
      }
    } else if (wt == ewt) {
      uint64_t bits = 0;
      if (!readElement(in, wt, bits)) return bad(std::string("truncated ") + kContentsNames[f]);
      if (absl::Status st = appendElement(t, bits, data, iv.name); !st.ok()) return st;
    } else {
      return bad(std::string(kContentsNames[f]) + " has the wrong wire type");
    }
  }
  if (!in.consumedEntireMessage()) return bad("broken contents");
  return absl::OkStatus();
}

// --- encoding -------------------------------------------------------------------------------

using protowire::lenFieldSize;
using protowire::putLenHeader;
using protowire::putVarint;
using protowire::varintSize;
using protowire::putString;

bool selected(const backends::InferResponse& r, const backends::Tensor& t) {
  if (r.requested.empty()) return true;
  for (const backends::RequestedOutput& ro : r.requested) {
    if (ro.name == t.name) return true;
  }
  return false;
}

size_t shapePackedSize(const std::vector<int64_t>& shape) {
  size_t n = 0;
  for (int64_t d : shape) n += varintSize(static_cast<uint64_t>(d));
  return n;
}

size_t outputTensorSize(const backends::Tensor& t) {
  size_t n = 0;
  if (!t.name.empty()) n += lenFieldSize(1, t.name.size());
  n += lenFieldSize(2, backends::dataTypeName(t.dtype).size());
  if (!t.shape.empty()) n += lenFieldSize(3, shapePackedSize(t.shape));
  return n;
}

size_t inferResponseSize(const backends::InferResponse& r) {
  size_t n = 0;
  if (!r.model_name.empty()) n += lenFieldSize(1, r.model_name.size());
  if (!r.model_version.empty()) n += lenFieldSize(2, r.model_version.size());
  if (!r.id.empty()) n += lenFieldSize(3, r.id.size());
  for (const backends::Tensor& t : r.outputs) {
    if (!selected(r, t)) continue;
    n += lenFieldSize(5, outputTensorSize(t));
    n += lenFieldSize(6, t.data.size());
  }
  return n;
}

void writeInferResponse(const backends::InferResponse& r, std::string& out) {
  if (!r.model_name.empty()) putString(out, 1, r.model_name);
  if (!r.model_version.empty()) putString(out, 2, r.model_version);
  if (!r.id.empty()) putString(out, 3, r.id);
  for (const backends::Tensor& t : r.outputs) {
    if (!selected(r, t)) continue;
    putLenHeader(out, 5, outputTensorSize(t));
    if (!t.name.empty()) putString(out, 1, t.name);
    putString(out, 2, backends::dataTypeName(t.dtype));
    if (!t.shape.empty()) {
      putLenHeader(out, 3, shapePackedSize(t.shape));
      for (int64_t d : t.shape) putVarint(out, static_cast<uint64_t>(d));
    }
  }
  for (const backends::Tensor& t : r.outputs) {
    if (!selected(r, t)) continue;
    putString(out, 6,
                std::string_view(reinterpret_cast<const char*>(t.data.data()), t.data.size()));
  }
}

}  // namespace

namespace {

// The field loop of a ModelInferRequest: header fields into `out`, inputs into `inputs`, each
// raw_input_contents into `raws`. Errors are the first malformation in field order.
absl::Status scanFields(std::string_view wire, backends::InferRequest& out,
                        std::vector<InputView>& inputs, std::vector<std::string_view>& raws) {
  out.protocol = net::Protocol::kGrpcKserve;
  out.binary_data_output = true;
  protowire::Input in(wire);
  for (uint32_t tag; (tag = in.readTag()) != 0;) {
    const uint32_t f = protowire::tagField(tag), wt = protowire::tagWireType(tag);
    if (f >= 1 && f <= 7 && wt != kLen) {
      return bad("field " + std::to_string(f) + " has wire type " + std::to_string(wt) +
                 ", expected length-delimited");
    }
    std::string_view v;
    switch (f) {
      case 1:
      case 2:
      case 3:
        if (!in.readView(v)) return bad("truncated string field " + std::to_string(f));
        (f == 1 ? out.model_name : f == 2 ? out.model_version : out.id).assign(v);
        break;
      case 4: {
        if (!in.readView(v)) return bad("truncated parameters entry");
        std::string_view key;
        Param p;
        if (absl::Status st = parseParamEntry(v, key, p); !st.ok()) return st;
        if (key == "priority" && (p.field == 2 || p.field == 5)) {
          out.priority = static_cast<int64_t>(p.u);
          if (out.priority < 0) {
            return absl::InvalidArgumentError("parameter 'priority' must be >= 0");
          }
        } else if (key == "timeout" && p.field == 2) {
          out.timeout_us = static_cast<int64_t>(p.u) > 0 ? p.u : 0;
        } else if (key == "sequence_id") {
          // Triton's sequence batcher (docs/BACKENDS.md "Sequences"): int64/uint64 or string;
          // 0 / "" mean no sequence.
          if ((p.field == 2 || p.field == 5) && out.sequence.setIntegerId(p.u)) {
            // an integer id, in SequenceParams' one range
          } else if (p.field == 3 && p.s.size() <= 256) {
            out.sequence.id.assign(p.s);
            out.sequence.id_is_string = true;
          } else {
            return absl::InvalidArgumentError(
                "parameter 'sequence_id' must be an integer from 0 to 2^63-1 or a string of at "
                "most 256 bytes");
          }
        } else if ((key == "sequence_start" || key == "sequence_end") && p.field == 1) {
          (key == "sequence_start" ? out.sequence.start : out.sequence.end) = p.u != 0;
        }
        break;
      }
      case 5: {
        if (!in.readView(v)) return bad("truncated inputs entry");
        inputs.emplace_back();
        if (absl::Status st = parseInput(v, inputs.back()); !st.ok()) return st;
        break;
      }
      case 6: {
        if (!in.readView(v)) return bad("truncated outputs entry");
        protowire::Input oin(v);
        backends::RequestedOutput ro;
        ro.binary = true;
        for (uint32_t otag; (otag = oin.readTag()) != 0;) {
          if (otag == protowire::makeTag(1, kLen)) {
            std::string_view name;
            if (!oin.readView(name)) return bad("truncated outputs.name");
            ro.name.assign(name);
          } else if (!oin.skipField(otag)) {
            return bad("broken outputs entry");
          }
        }
        if (!oin.consumedEntireMessage()) return bad("broken outputs entry");
        out.outputs.push_back(std::move(ro));
        break;
      }
      case 7:
        if (!in.readView(v)) return bad("truncated raw_input_contents");
        raws.push_back(v);
        break;
      default:
        if (!in.skipField(tag)) return bad("broken field " + std::to_string(f));
    }
  }
  if (!in.consumedEntireMessage()) return bad("truncated or invalid tag");
  return absl::OkStatus();
}

absl::Status unknownDatatype(const InputView& iv) {
  return absl::InvalidArgumentError("input '" + std::string(iv.name) + "': unknown datatype '" +
                                    std::string(iv.datatype) + "'");
}

}  // namespace

absl::Status decodeModelInferRequest(std::string_view wire, backends::InferRequest& out,
                                     uint64_t* copied_bytes) {
  return decodeModelInferRequest(wire, out, copied_bytes, static_cast<const HeaderHook*>(nullptr));
}

absl::Status decodeModelInferRequest(std::string_view wire, backends::InferRequest& out,
                                     uint64_t* copied_bytes, const backends::InputPlacer* place) {
  if (place == nullptr || !*place) {
    return decodeModelInferRequest(wire, out, copied_bytes, static_cast<const HeaderHook*>(nullptr));
  }
  const HeaderHook hook = [place](backends::InferRequest& r) {
    (*place)(r);
    return absl::OkStatus();
  };
  return decodeModelInferRequest(wire, out, copied_bytes, &hook);
}

absl::Status decodeModelInferRequest(std::string_view wire, backends::InferRequest& out,
                                     uint64_t* copied_bytes, const HeaderHook* hook) {
  std::vector<InputView> inputs;
  std::vector<std::string_view> raws;
  if (absl::Status st = scanFields(wire, out, inputs, raws); !st.ok()) return st;

  if (!raws.empty() && raws.size() != inputs.size()) {
    return absl::InvalidArgumentError("expected " + std::to_string(inputs.size()) +
                                      " raw_input_contents (one per input), got " +
                                      std::to_string(raws.size()));
  }
  // Header pass: every input's byte size (raw: its entry; typed contents: measured by a
  // decoding pass that writes nothing), so the inputs can be placed before any byte is written.
  uint64_t copied = 0;
  bool all_sized = !inputs.empty();
  out.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputView& iv = inputs[i];
    std::optional<DataType> dt = backends::parseDataType(iv.datatype);
    if (!dt) return unknownDatatype(iv);
    backends::Tensor& t = out.inputs.emplace_back();
    t.name.assign(iv.name);
    t.dtype = *dt;
    t.shape = iv.shape;
    if (!raws.empty()) {
      if (iv.has_contents && !iv.contents.empty()) {
        return absl::InvalidArgumentError(
            "contents field must not be specified when using raw_input_contents for '" + t.name +
            "'");
      }
      t.slot_bytes = raws[i].size();
    } else if (iv.has_contents) {
      ElemOut measure;
      if (absl::Status st = decodeContents(iv, *dt, measure); !st.ok()) return st;
      t.slot_bytes = measure.n;
    } else {
      all_sized = false;
    }
    copied += t.slot_bytes;
  }
  // One copy: the hook (the model) may place the inputs into its batch slots; each element is
  // then written once, from the message bytes into the slot (else into Tensor::data).
  if (all_sized && hook != nullptr && *hook) {
    if (absl::Status st = (*hook)(out); !st.ok()) return st;
  }
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    backends::Tensor& t = out.inputs[i];
    if (t.slot == nullptr) {
      t.data.resize(t.slot_bytes);
      t.slot_bytes = 0;
    }
    if (!raws.empty()) {
      if (!raws[i].empty()) std::memcpy(t.mutableBytes(), raws[i].data(), raws[i].size());
    } else if (inputs[i].has_contents) {
      ElemOut write{t.mutableBytes(), 0};
      (void)decodeContents(inputs[i], t.dtype, write);  // measured above: cannot fail now
    }
  }
  if (copied_bytes != nullptr) *copied_bytes = copied;
  return absl::OkStatus();
}

absl::Status decodeModelInferHeader(std::string_view head, backends::InferRequest& out,
                                    bool& streamable) {
  streamable = false;
  std::vector<InputView> inputs;
  std::vector<std::string_view> raws;
  if (absl::Status st = scanFields(head, out, inputs, raws); !st.ok()) return st;
  if (!raws.empty()) return absl::OkStatus();  // not a header: the caller stops at field 7
  out.inputs.reserve(inputs.size());
  for (const InputView& iv : inputs) {
    std::optional<DataType> dt = backends::parseDataType(iv.datatype);
    if (!dt || *dt == DataType::kBytes || (iv.has_contents && !iv.contents.empty())) {
      out.inputs.clear();
      return absl::OkStatus();  // the whole-message decoder decides (its error, its sizes)
    }
    std::optional<uint64_t> bytes = backends::tensorByteSize(iv.shape, *dt);
    if (!bytes) {
      out.inputs.clear();
      return absl::OkStatus();
    }
    backends::Tensor& t = out.inputs.emplace_back();
    t.name.assign(iv.name);
    t.dtype = *dt;
    t.shape = iv.shape;
    t.slot_bytes = static_cast<size_t>(*bytes);
  }
  streamable = true;
  return absl::OkStatus();
}

void encodeModelInferResponse(const backends::InferResponse& response, std::string& framed) {
  const size_t size = inferResponseSize(response);
  const size_t at = framed.size();
  framed.reserve(at + kGrpcPrefixBytes + size);
  framed.resize(at + kGrpcPrefixBytes);
  writeGrpcPrefix(framed.data() + at, static_cast<uint32_t>(size));
  writeInferResponse(response, framed);
}

void encodeModelStreamInferResponse(const backends::InferResponse* response,
                                    std::string_view error_message, std::string& framed) {
  size_t size = 0;
  size_t inner = 0;
  if (!error_message.empty()) size += lenFieldSize(1, error_message.size());
  if (response != nullptr) {
    inner = inferResponseSize(*response);
    size += lenFieldSize(2, inner);
  }
  const size_t at = framed.size();
  framed.reserve(at + kGrpcPrefixBytes + size);
  framed.resize(at + kGrpcPrefixBytes);
  writeGrpcPrefix(framed.data() + at, static_cast<uint32_t>(size));
  if (!error_message.empty()) putString(framed, 1, error_message);
  if (response != nullptr) {
    putLenHeader(framed, 2, inner);
    writeInferResponse(*response, framed);
  }
}

}  // namespace infergate::frontend
