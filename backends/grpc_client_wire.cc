#include "backends/grpc_client_wire.h"

#include <fmt/format.h>

#include <charconv>

namespace infergate::backends::wire {

namespace {
using common::protowire::kFixed32;
using common::protowire::kFixed64;
using common::protowire::kLen;
using common::protowire::kVarint;

// InferParameter{int64_param=2} / {string_param=3} as a map<string, InferParameter> entry.
void putParamInt(std::string& out, uint32_t field, std::string_view key, int64_t v) {
  std::string param;
  putVarintField(param, 2, static_cast<uint64_t>(v));
  std::string entry;
  putString(entry, 1, key);
  putString(entry, 2, param);
  putString(out, field, entry);
}
void putParamString(std::string& out, uint32_t field, std::string_view key, std::string_view v) {
  std::string param;
  putString(param, 3, v);
  std::string entry;
  putString(entry, 1, key);
  putString(entry, 2, param);
  putString(out, field, entry);
}

void putParamBool(std::string& out, uint32_t field, std::string_view key, bool v) {
  std::string param;
  putVarintField(param, 1, v ? 1 : 0);
  std::string entry;
  putString(entry, 1, key);
  putString(entry, 2, param);
  putString(out, field, entry);
}

absl::Status malformed(std::string_view what) {
  return absl::InternalError("malformed " + std::string(what) + " from the backend");
}
}  // namespace

std::string encodeNameVersion(std::string_view name, std::string_view version) {
  std::string out;
  if (!name.empty()) putString(out, 1, name);
  if (!version.empty()) putString(out, 2, version);
  return out;
}

std::string encodeSystemShmRegister(std::string_view name, std::string_view key, uint64_t offset,
                                    uint64_t byte_size) {
  std::string out;
  putString(out, 1, name);
  putString(out, 2, key);
  if (offset != 0) putVarintField(out, 3, offset);
  putVarintField(out, 4, byte_size);
  return out;
}

std::string encodeCudaShmRegister(std::string_view name, std::string_view raw_handle,
                                  int64_t device_id, uint64_t byte_size) {
  std::string out;
  putString(out, 1, name);
  putString(out, 2, raw_handle);
  if (device_id != 0) putVarintField(out, 3, static_cast<uint64_t>(device_id));
  putVarintField(out, 4, byte_size);
  return out;
}

absl::StatusOr<bool> decodeReady(std::string_view msg) {
  Reader r(msg);
  bool ready = false;
  while (r.next()) {
    if (r.field() == 1 && r.wireType() == kVarint) ready = r.varint() != 0;
  }
  if (r.error()) return malformed("readiness response");
  return ready;
}

namespace {
// ModelMetadataResponse.TensorMetadata and ModelInferResponse.InferOutputTensor begin alike:
// name=1, datatype=2, shape=3 (packed or not); the rest is ignored.
template <typename T>
absl::StatusOr<T> decodeNamedTensor(std::string_view msg, const char* what) {
  T t;
  Reader r(msg);
  while (r.next()) {
    if (r.field() == 1 && r.wireType() == kLen) t.name = std::string(r.bytes());
    else if (r.field() == 2 && r.wireType() == kLen) t.datatype = std::string(r.bytes());
    else if (r.field() == 3 && !readInt64s(r, t.shape)) return malformed(what);
  }
  if (r.error()) return malformed(what);
  return t;
}
}  // namespace

absl::StatusOr<ModelMetadata> decodeModelMetadata(std::string_view msg) {
  ModelMetadata m;
  Reader r(msg);
  while (r.next()) {
    if (r.wireType() != kLen) continue;
    switch (r.field()) {
      case 1: m.name = std::string(r.bytes()); break;
      case 2: m.versions.emplace_back(r.bytes()); break;
      case 3: m.platform = std::string(r.bytes()); break;
      case 4:
      case 5: {
        absl::StatusOr<TensorMetadata> t =
            decodeNamedTensor<TensorMetadata>(r.bytes(), "tensor metadata");
        if (!t.ok()) return t.status();
        (r.field() == 4 ? m.inputs : m.outputs).push_back(std::move(*t));
        break;
      }
      default: break;
    }
  }
  if (r.error()) return malformed("model metadata");
  return m;
}

size_t ModelInferEncoding::totalBytes() const {
  size_t n = 0;
  for (const Piece& p : pieces) n += p.size;
  return n;
}

std::string ModelInferEncoding::flatten() const {
  std::string s;
  for (const Piece& p : pieces) {
    if (p.external) s.append(reinterpret_cast<const char*>(p.data), p.size);
    else s.append(meta, p.offset, p.size);
  }
  return s;
}

namespace {
// Appends meta[from, meta.size()) as a piece (merging with a preceding meta piece).
void closeMetaPiece(ModelInferEncoding& out, size_t from) {
  if (out.meta.size() == from) return;
  if (!out.pieces.empty() && !out.pieces.back().external &&
      out.pieces.back().offset + out.pieces.back().size == from) {
    out.pieces.back().size += out.meta.size() - from;
    return;
  }
  out.pieces.push_back({false, from, nullptr, out.meta.size() - from});
}
void addExternal(ModelInferEncoding& out, const uint8_t* data, size_t size) {
  if (size == 0) return;
  out.pieces.push_back({true, 0, data, size});
  out.raw_bytes += size;
}
}  // namespace

void encodeModelInfer(const InferParams& params, const std::vector<InferInput>& inputs,
                      const std::vector<InferOutput>& outputs, ModelInferEncoding& out) {
  out.meta.clear();
  out.pieces.clear();
  out.raw_bytes = 0;
  std::string& m = out.meta;
  putString(m, 1, params.model_name);
  if (!params.model_version.empty()) putString(m, 2, params.model_version);
  if (!params.id.empty()) putString(m, 3, params.id);
  if (params.priority > 0) putParamInt(m, 4, "priority", params.priority);
  if (params.timeout_us > 0) putParamInt(m, 4, "timeout", static_cast<int64_t>(params.timeout_us));
  if (!params.sequence_id.empty()) {
    uint64_t id = 0;
    const auto [p, ec] = std::from_chars(params.sequence_id.data(),
                                         params.sequence_id.data() + params.sequence_id.size(), id);
    if (params.sequence_id_is_string || ec != std::errc() ||
        p != params.sequence_id.data() + params.sequence_id.size()) {
      putParamString(m, 4, "sequence_id", params.sequence_id);
    } else {
      putParamInt(m, 4, "sequence_id", static_cast<int64_t>(id));
    }
    if (params.sequence_start) putParamBool(m, 4, "sequence_start", true);
    if (params.sequence_end) putParamBool(m, 4, "sequence_end", true);
  }
  std::string sub;
  for (const InferInput& in : inputs) {
    sub.clear();
    putString(sub, 1, in.name);
    putString(sub, 2, dataTypeName(in.dtype));
    if (in.shape != nullptr) putPackedInt64(sub, 3, *in.shape);
    if (!in.shm_region.empty()) {
      putParamString(sub, 4, "shared_memory_region", in.shm_region);
      putParamInt(sub, 4, "shared_memory_byte_size", static_cast<int64_t>(in.bytes));
      if (in.shm_offset != 0) {
        putParamInt(sub, 4, "shared_memory_offset", static_cast<int64_t>(in.shm_offset));
      }
    }
    putString(m, 5, sub);
  }
  for (const InferOutput& o : outputs) {
    sub.clear();
    putString(sub, 1, o.name);
    if (!o.shm_region.empty()) {
      putParamString(sub, 2, "shared_memory_region", o.shm_region);
      putParamInt(sub, 2, "shared_memory_byte_size", static_cast<int64_t>(o.shm_bytes));
      if (o.shm_offset != 0) {
        putParamInt(sub, 2, "shared_memory_offset", static_cast<int64_t>(o.shm_offset));
      }
    }
    putString(m, 6, sub);
  }
  // Reserve first so that offsets stay valid (meta never reallocates below): per raw input at
  // most 1 tag byte + 10 length bytes.
  m.reserve(m.size() + inputs.size() * 11);
  size_t from = 0;
  for (const InferInput& in : inputs) {
    if (!in.shm_region.empty()) continue;
    putTag(m, 7, kLen);
    putVarint(m, in.bytes);
    closeMetaPiece(out, from);
    from = m.size();
    addExternal(out, in.data, in.bytes);
  }
  closeMetaPiece(out, from);
}

absl::StatusOr<std::vector<InferResponseOutput>> decodeModelInferResponse(std::string_view msg) {
  std::vector<InferResponseOutput> outs;
  std::vector<std::pair<const uint8_t*, size_t>> raws;
  Reader r(msg);
  while (r.next()) {
    if (r.wireType() != kLen) continue;
    if (r.field() == 5) {
      absl::StatusOr<InferResponseOutput> o =
          decodeNamedTensor<InferResponseOutput>(r.bytes(), "output tensor");
      if (!o.ok()) return o.status();
      outs.push_back(std::move(*o));
    } else if (r.field() == 6) {
      raws.emplace_back(r.data(), r.size());
    }
  }
  if (r.error()) return malformed("ModelInferResponse");
  if (!raws.empty() && raws.size() != outs.size()) {
    return absl::InternalError(fmt::format(
        "backend returned {} raw_output_contents for {} outputs", raws.size(), outs.size()));
  }
  for (size_t i = 0; i < raws.size(); ++i) {
    outs[i].raw = raws[i].first;
    outs[i].raw_bytes = raws[i].second;
  }
  return outs;
}

// tensorflow.DataType numbers (frontend/proto/tf_tensor.proto).
std::string tfDataTypeName(int tf) {
  // Indexed by number (frontend/proto/tf_tensor.proto).
  static constexpr const char* kNames[] = {
      "DT_INVALID",  "DT_FLOAT",   "DT_DOUBLE",     "DT_INT32",   "DT_UINT8",    "DT_INT16",
      "DT_INT8",     "DT_STRING",  "DT_COMPLEX64",  "DT_INT64",   "DT_BOOL",     "DT_QINT8",
      "DT_QUINT8",   "DT_QINT32",  "DT_BFLOAT16",   "DT_QINT16",  "DT_QUINT16",  "DT_UINT16",
      "DT_COMPLEX128", "DT_HALF",  "DT_RESOURCE",   "DT_VARIANT", "DT_UINT32",   "DT_UINT64"};
  if (tf >= 0 && tf < static_cast<int>(std::size(kNames))) return kNames[tf];
  return fmt::format("DT_{}", tf);
}

namespace {
// Appends the well-formed prefix of a BYTES buffer's elements; true when it is all of it.
bool bytesElements(const uint8_t* data, size_t size, std::vector<std::string_view>& out) {
  size_t off = 0;
  while (off < size) {
    if (size - off < 4) return false;
    uint32_t len = static_cast<uint32_t>(data[off]) | static_cast<uint32_t>(data[off + 1]) << 8 |
                   static_cast<uint32_t>(data[off + 2]) << 16 |
                   static_cast<uint32_t>(data[off + 3]) << 24;
    off += 4;
    if (len > size - off) return false;
    out.emplace_back(reinterpret_cast<const char*>(data + off), len);
    off += len;
  }
  return true;
}
}  // namespace

std::optional<std::vector<std::string_view>> splitBytesTensor(const uint8_t* data, size_t size) {
  std::vector<std::string_view> out;
  if (size > 0 && data == nullptr) return std::nullopt;
  if (!bytesElements(data, size, out)) return std::nullopt;
  return out;
}

namespace {
// ModelSpec{name=1, version=2 (Int64Value{value=1}), signature_name=3 (`with_signature`)}.
std::string encodeModelSpec(const TfModelSpec& spec, bool with_signature) {
  std::string ms;
  putString(ms, 1, spec.name);
  if (spec.version >= 0) {
    std::string v;
    putVarintField(v, 1, static_cast<uint64_t>(spec.version));
    putString(ms, 2, v);
  }
  if (with_signature && !spec.signature_name.empty()) putString(ms, 3, spec.signature_name);
  return ms;
}
}  // namespace

void encodePredict(const TfModelSpec& spec, const std::vector<InferInput>& inputs,
                   const std::vector<std::string_view>& output_filter, ModelInferEncoding& out) {
  out.meta.clear();
  out.pieces.clear();
  out.raw_bytes = 0;
  std::string& m = out.meta;
  putString(m, 1, encodeModelSpec(spec, true));
  // Each map entry: {key=1, value=2: TensorProto{dtype=1, tensor_shape=2, tensor_content=4}};
  // the content is the last field of the entry, so the entry is header + external bytes.
  // BYTES: TensorProto{dtype=7, tensor_shape=2, string_val=8 per element}, all in meta.
  std::string tp, shape, dim;
  std::vector<std::string_view> strings;
  size_t from = 0;  // start of the meta bytes not yet in a piece
  for (const InferInput& in : inputs) {
    shape.clear();
    if (in.shape != nullptr) {
      for (int64_t d : *in.shape) {
        dim.clear();
        putVarintField(dim, 1, static_cast<uint64_t>(d));
        putString(shape, 2, dim);
      }
    }
    tp.clear();
    putVarintField(tp, 1, static_cast<uint64_t>(tfDataType(in.dtype)));
    putString(tp, 2, shape);
    size_t external = in.bytes;
    if (in.dtype == DataType::kBytes) {
      external = 0;
      strings.clear();
      if (in.bytes > 0 && in.data != nullptr) bytesElements(in.data, in.bytes, strings);
      for (std::string_view e : strings) {
        putString(tp, 8, e);
        out.raw_bytes += e.size();
      }
    } else {
      // tensor_content tag + length; then the bytes (external).
      putTag(tp, 4, kLen);
      putVarint(tp, in.bytes);
    }
    const size_t tp_total = tp.size() + external;
    std::string key;
    putString(key, 1, in.name);
    const size_t entry_total = key.size() + 1 + varintSize(tp_total) + tp_total;
    putTag(m, 2, kLen);
    putVarint(m, entry_total);
    m += key;
    putTag(m, 2, kLen);
    putVarint(m, tp_total);
    m += tp;
    if (external > 0) {
      closeMetaPiece(out, from);
      from = m.size();
      addExternal(out, in.data, external);
    }
  }
  for (std::string_view f : output_filter) putString(m, 3, f);
  closeMetaPiece(out, from);
}

namespace {
constexpr int kTfString = 7;  // DT_STRING

// TensorShapeProto{dim=2: {size=1}, unknown_rank=3}.
bool decodeTfShape(std::string_view msg, std::vector<int64_t>& dims, bool* unknown_rank) {
  Reader s(msg);
  while (s.next()) {
    if (s.field() == 3 && s.wireType() == kVarint) {
      if (unknown_rank != nullptr) *unknown_rank = s.varint() != 0;
      continue;
    }
    if (s.field() != 2 || s.wireType() != kLen) continue;
    Reader d(s.bytes());
    int64_t size = 0;
    while (d.next()) {
      if (d.field() == 1 && d.wireType() == kVarint) size = static_cast<int64_t>(d.varint());
    }
    if (d.error()) return false;
    dims.push_back(size);
  }
  return !s.error();
}

struct DecodedTensor {
  InferResponseOutput out;
  bool is_string = false;                // DT_STRING: `strings`, not tensor_content
  std::vector<std::string_view> strings;  // string_val, views into the message
};

absl::StatusOr<DecodedTensor> decodeTensorProto(std::string_view msg) {
  DecodedTensor t;
  InferResponseOutput& o = t.out;
  Reader r(msg);
  bool has_content = false;
  while (r.next()) {
    if (r.field() == 1 && r.wireType() == kVarint) {
      std::optional<DataType> dt = fromTfDataType(static_cast<int>(r.varint()));
      o.datatype = dt ? std::string(dataTypeName(*dt)) : fmt::format("DT_{}", r.varint());
      t.is_string = r.varint() == kTfString;
    } else if (r.field() == 2 && r.wireType() == kLen) {
      if (!decodeTfShape(r.bytes(), o.shape, nullptr)) return malformed("TensorShapeProto");
    } else if (r.field() == 4 && r.wireType() == kLen) {
      o.raw = r.data();
      o.raw_bytes = r.size();
      has_content = true;
    } else if (r.field() == 8 && r.wireType() == kLen) {
      t.strings.push_back(r.bytes());
    } else if (r.field() >= 5 && r.field() <= 17) {
      return absl::UnimplementedError(
          "TF Serving returned a tensor in typed fields (e.g. float_val); infergate reads "
          "tensor_content only");
    }
  }
  if (r.error()) return malformed("TensorProto");
  if (!t.strings.empty() && !t.is_string) {
    return absl::InternalError(
        fmt::format("TF Serving returned string_val in a {} tensor", o.datatype));
  }
  if (t.is_string) {
    if (has_content) {
      return absl::InternalError("TF Serving returned a DT_STRING tensor as tensor_content");
    }
    const std::optional<uint64_t> n = elementCount(o.shape);
    if (!n || *n != t.strings.size()) {
      return absl::InternalError(fmt::format(
          "TF Serving returned {} string_val for a DT_STRING tensor of shape {}",
          t.strings.size(), shapeToString(o.shape)));
    }
  } else if (!has_content) {
    o.raw = reinterpret_cast<const uint8_t*>("");  // empty tensor
  }
  return t;
}

absl::StatusOr<std::vector<InferResponseOutput>> decodePredict(std::string_view msg,
                                                               std::string* string_storage) {
  std::vector<DecodedTensor> ts;
  Reader r(msg);
  while (r.next()) {
    if (r.field() != 1 || r.wireType() != kLen) continue;
    Reader e(r.bytes());
    std::string key;
    std::string_view value;
    while (e.next()) {
      if (e.field() == 1 && e.wireType() == kLen) key = std::string(e.bytes());
      if (e.field() == 2 && e.wireType() == kLen) value = e.bytes();
    }
    if (e.error()) return malformed("PredictResponse");
    absl::StatusOr<DecodedTensor> t = decodeTensorProto(value);
    if (!t.ok()) return t.status();
    t->out.name = std::move(key);
    ts.push_back(std::move(*t));
  }
  if (r.error()) return malformed("PredictResponse");
  // DT_STRING outputs: one copy into BYTES layout (4-byte LE length + bytes per element).
  size_t total = 0;
  bool any_string = false;
  for (const DecodedTensor& t : ts) {
    if (!t.is_string) continue;
    any_string = true;
    for (std::string_view s : t.strings) total += 4 + s.size();
  }
  if (any_string && string_storage == nullptr) {
    return absl::UnimplementedError("TF Serving returned a DT_STRING output");
  }
  std::vector<size_t> offsets(ts.size(), 0), lengths(ts.size(), 0);
  if (any_string) {
    std::string& st = *string_storage;
    st.clear();
    st.reserve(total);
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].is_string) continue;
      offsets[i] = st.size();
      for (std::string_view s : ts[i].strings) {
        const uint32_t n = static_cast<uint32_t>(s.size());
        const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                             static_cast<char>((n >> 16) & 0xff),
                             static_cast<char>((n >> 24) & 0xff)};
        st.append(len, 4);
        st.append(s.data(), s.size());
      }
      lengths[i] = st.size() - offsets[i];
    }
  }
  std::vector<InferResponseOutput> outs;
  outs.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].is_string) {
      ts[i].out.raw = reinterpret_cast<const uint8_t*>(string_storage->data()) + offsets[i];
      ts[i].out.raw_bytes = lengths[i];
    }
    outs.push_back(std::move(ts[i].out));
  }
  return outs;
}
}  // namespace

absl::StatusOr<std::vector<InferResponseOutput>> decodePredictResponse(
    std::string_view msg, std::string& string_storage) {
  return decodePredict(msg, &string_storage);
}

absl::StatusOr<std::vector<InferResponseOutput>> decodePredictResponse(std::string_view msg) {
  return decodePredict(msg, nullptr);
}

std::string encodeGetModelStatus(const TfModelSpec& spec) {
  std::string out;
  putString(out, 1, encodeModelSpec(spec, false));
  return out;
}

absl::Status decodeModelStatus(std::string_view msg) {
  // GetModelStatusResponse{model_version_status=1: {version=1, state=2 (AVAILABLE=30), ...}}
  Reader r(msg);
  bool any = false;
  while (r.next()) {
    if (r.field() != 1 || r.wireType() != kLen) continue;
    Reader v(r.bytes());
    while (v.next()) {
      if (v.field() == 2 && v.wireType() == kVarint && v.varint() == 30) any = true;
    }
  }
  if (r.error()) return malformed("GetModelStatusResponse");
  if (!any) return absl::UnavailableError("no version of the model is AVAILABLE");
  return absl::OkStatus();
}

std::string encodeGetModelMetadata(const TfModelSpec& spec) {
  std::string out;
  putString(out, 1, encodeModelSpec(spec, false));
  putString(out, 2, "signature_def");
  return out;
}

namespace {
// TensorInfo{name=1, dtype=2, tensor_shape=3, coo_sparse=4, composite_tensor=5}.
bool decodeTfTensorInfo(std::string_view msg, TfTensorInfo& t) {
  Reader r(msg);
  bool has_shape = false;
  while (r.next()) {
    if (r.field() == 1 && r.wireType() == kLen) {
      t.tensor_name = std::string(r.bytes());
    } else if (r.field() == 2 && r.wireType() == kVarint) {
      t.dtype = static_cast<int>(r.varint());
    } else if (r.field() == 3 && r.wireType() == kLen) {
      has_shape = true;
      t.shape.clear();
      if (!decodeTfShape(r.bytes(), t.shape, &t.unknown_rank)) return false;
    }
  }
  if (!has_shape) t.unknown_rank = true;
  return !r.error();
}

// One map<string, TensorInfo> entry {key=1, value=2} into `out` (a repeated key replaces).
bool decodeTfTensorInfoEntry(std::string_view entry, std::vector<TfTensorInfo>& out) {
  Reader e(entry);
  TfTensorInfo t;
  std::string_view value;
  while (e.next()) {
    if (e.field() == 1 && e.wireType() == kLen) t.alias = std::string(e.bytes());
    if (e.field() == 2 && e.wireType() == kLen) value = e.bytes();
  }
  if (e.error() || !decodeTfTensorInfo(value, t)) return false;
  for (TfTensorInfo& x : out) {
    if (x.alias == t.alias) {
      x = std::move(t);
      return true;
    }
  }
  out.push_back(std::move(t));
  return true;
}

// SignatureDef{inputs=1, outputs=2, method_name=3}.
bool decodeTfSignatureDef(std::string_view msg, TfSignatureDef& s) {
  Reader r(msg);
  while (r.next()) {
    if (r.wireType() != kLen) continue;
    if (r.field() == 1 && !decodeTfTensorInfoEntry(r.bytes(), s.inputs)) return false;
    if (r.field() == 2 && !decodeTfTensorInfoEntry(r.bytes(), s.outputs)) return false;
    if (r.field() == 3) s.method_name = std::string(r.bytes());
  }
  return !r.error();
}

// Splits a map entry {key=1, value=2}; false when malformed.
bool mapEntry(std::string_view entry, std::string_view& key, std::string_view& value) {
  Reader e(entry);
  key = {};
  value = {};
  while (e.next()) {
    if (e.field() == 1 && e.wireType() == kLen) key = e.bytes();
    if (e.field() == 2 && e.wireType() == kLen) value = e.bytes();
  }
  return !e.error();
}
}  // namespace

absl::StatusOr<std::vector<TfSignatureDef>> decodeGetModelMetadata(std::string_view msg) {
  // GetModelMetadataResponse{model_spec=1, metadata=2: map<string, Any>}.
  std::string_view any;
  bool found = false;
  Reader r(msg);
  while (r.next()) {
    if (r.field() != 2 || r.wireType() != kLen) continue;
    std::string_view key, value;
    if (!mapEntry(r.bytes(), key, value)) return malformed("GetModelMetadataResponse");
    if (key == "signature_def") {
      any = value;
      found = true;
    }
  }
  if (r.error()) return malformed("GetModelMetadataResponse");
  if (!found) {
    return absl::InternalError("GetModelMetadataResponse has no \"signature_def\" metadata");
  }
  // google.protobuf.Any{type_url=1, value=2}.
  std::string_view type_url, value;
  Reader a(any);
  while (a.next()) {
    if (a.field() == 1 && a.wireType() == kLen) type_url = a.bytes();
    if (a.field() == 2 && a.wireType() == kLen) value = a.bytes();
  }
  if (a.error()) return malformed("GetModelMetadataResponse signature_def Any");
  constexpr std::string_view kType = "tensorflow.serving.SignatureDefMap";
  const size_t slash = type_url.rfind('/');
  if (type_url.substr(slash == std::string_view::npos ? 0 : slash + 1) != kType) {
    return absl::InternalError(fmt::format(
        "GetModelMetadataResponse signature_def is a '{}', not a {}", std::string(type_url),
        std::string(kType)));
  }
  // SignatureDefMap{signature_def=1: map<string, SignatureDef>}.
  std::vector<TfSignatureDef> sigs;
  Reader m(value);
  while (m.next()) {
    if (m.field() != 1 || m.wireType() != kLen) continue;
    std::string_view key, def;
    if (!mapEntry(m.bytes(), key, def)) return malformed("SignatureDefMap");
    TfSignatureDef s;
    s.key = std::string(key);
    if (!decodeTfSignatureDef(def, s)) return malformed("SignatureDef");
    bool replaced = false;
    for (TfSignatureDef& x : sigs) {
      if (x.key == s.key) {
        x = std::move(s);
        replaced = true;
        break;
      }
    }
    if (!replaced) sigs.push_back(std::move(s));
  }
  if (m.error()) return malformed("SignatureDefMap");
  return sigs;
}

}  // namespace infergate::backends::wire
