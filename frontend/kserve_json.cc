#include "frontend/kserve_json.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "common/checked.h"
#include "fmt/format.h"
#include "frontend/http.h"
#include "frontend/streamed_tensor.h"
#include "frontend/tensor_json.h"
#include "simdjson.h"

namespace infergate::frontend {
namespace {

using namespace tensor_json;  // DataType, ValueError, the simdjson DOM types
using backends::InferRequest;
using backends::Tensor;

static_assert(std::endian::native == std::endian::little,
              "tensor data is little-endian; a big-endian host needs byte swaps in this codec");

// JSON headers up to this size are parsed by the thread_local parser, which keeps its buffers
// (about 15 bytes of memory per input byte) between requests. Larger ones get a parser of their
// own, freed on return, so one huge request does not pin memory in every worker thread.
constexpr size_t kRetainedParserCapacity = size_t{1} << 20;
// Sanity bound on a JSON tensor's decoded size (the element count is already bounded by the
// JSON's own size: precheckCount).
constexpr uint64_t kMaxJsonTensorBytes = uint64_t{1} << 40;

absl::Status invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

// A short rendering of a JSON value for error messages.
std::string describe(element e) {
  switch (e.type()) {
    case element_type::ARRAY: return "an array";
    case element_type::OBJECT: return "an object";
    default: break;
  }
  std::string s = simdjson::minify(e);
  if (s.size() > 48) {
    s.resize(45);
    s += "...";
  }
  return s;
}

// dom::array::size() saturates at 0xFFFFFF; count the rest by walking.
size_t arraySize(array a) {
  size_t n = a.size();
  if (n < 0xFFFFFF) return n;
  n = 0;
  for (element e : a) {
    (void)e;
    ++n;
  }
  return n;
}

// Non-negative JSON integer (int64 or uint64 typed).
bool getNonNegative(element e, uint64_t& out) {
  if (e.type() == element_type::INT64) {
    int64_t v = 0;
    if (e.get_int64().get(v) || v < 0) return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  if (e.type() == element_type::UINT64) return !e.get_uint64().get(out);
  return false;
}

using common::checkedMul;

// ---------------------------------------------------------------------------------------------
// Element conversion: JSON scalar -> the element of datatype `Tag` at `dst` (tensor_json).

template <class Tag>
ValueError storeElement(element e, uint8_t* dst) {
  using T = typename Tag::Storage;
  T v{};
  ValueError r = ValueError::kOk;
  if constexpr (Tag::kIsBool) {
    bool b = false;
    r = readBool(e, b);
    v = b ? 1 : 0;
  } else if constexpr (Tag::kIsInteger) {
    r = readInteger(e, v);
  } else {
    double d = 0;
    r = readNumber(e, d);
    if (r != ValueError::kOk) return r;
    v = narrowFloat<Tag>(d);
    // JSON numbers are finite: an infinite FP32/FP16/BF16 is an overflow.
    if constexpr (Tag::value != DataType::kFp64) {
      if (isInfinite<Tag>(v)) return ValueError::kOutOfRange;
    }
  }
  if (r != ValueError::kOk) return r;
  std::memcpy(dst, &v, sizeof(T));
  return ValueError::kOk;
}

// ---------------------------------------------------------------------------------------------
// Walking "data" (flat or nested) in row-major order.

struct InputCtx {
  std::string_view name;
  DataType dtype;
  const std::vector<int64_t>& shape;
  uint64_t count;
};

absl::Status leafStatus(const InputCtx& c, ValueError r, element e) {
  const std::string_view dt = backends::dataTypeName(c.dtype);
  switch (r) {
    case ValueError::kOutOfRange:
      return invalid(fmt::format("input '{}': value {} out of range for {}", c.name, describe(e), dt));
    case ValueError::kNotInteger:
      return invalid(fmt::format("input '{}': value {} is not an integer, as {} requires", c.name,
                                 describe(e), dt));
    case ValueError::kNesting:
      return invalid(fmt::format("input '{}': data nesting does not match shape {}: found an array "
                                 "where a value was expected",
                                 c.name, backends::shapeToString(c.shape)));
    case ValueError::kWrongType: {
      const char* want = c.dtype == DataType::kBool    ? "true or false"
                         : c.dtype == DataType::kBytes ? "a string"
                                                       : "a number";
      return invalid(fmt::format("input '{}': expected {} for {}, got {}", c.name, want, dt,
                                 describe(e)));
    }
    case ValueError::kOk: break;
  }
  return absl::OkStatus();
}

template <typename Leaf>
absl::Status walkNested(const InputCtx& c, array a, size_t depth, Leaf& leaf) {
  const size_t n = arraySize(a);
  if (n != static_cast<uint64_t>(c.shape[depth])) {
    return invalid(fmt::format("input '{}': data nesting does not match shape {}: dimension {} has "
                               "{} elements, expected {}",
                               c.name, backends::shapeToString(c.shape), depth, n, c.shape[depth]));
  }
  if (depth + 1 == c.shape.size()) {
    for (element e : a) {
      ValueError r = leaf(e);
      if (r != ValueError::kOk) [[unlikely]] return leafStatus(c, r, e);
    }
    return absl::OkStatus();
  }
  for (element e : a) {
    array sub;
    if (e.get_array().get(sub)) {
      return invalid(fmt::format("input '{}': data nesting does not match shape {}: expected an "
                                 "array at dimension {}, got {}",
                                 c.name, backends::shapeToString(c.shape), depth + 1, describe(e)));
    }
    absl::Status s = walkNested(c, sub, depth + 1, leaf);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Calls leaf(element) for each of the c.count values of `data`, which is either flat or nested
// exactly as the shape says (rank >= 2 and the first element is an array).
bool isNested(const InputCtx& c, array data) {
  element first;
  return c.shape.size() >= 2 && !data.at(0).get(first) && first.type() == element_type::ARRAY;
}

// Checks the value count before anything is allocated for it: exactly for flat data; for nested
// data, a bound (every value takes at least one tape slot), which caps the allocation by the JSON
// size (the walk checks the exact structure).
absl::Status precheckCount(const InputCtx& c, array data) {
  if (!isNested(c, data)) {
    const size_t n = arraySize(data);
    if (n != c.count) {
      return invalid(fmt::format("input '{}': expected {} elements for shape {}, got {}", c.name,
                                 c.count, backends::shapeToString(c.shape), n));
    }
  } else if (c.count > data.number_of_slots()) {
    return invalid(fmt::format("input '{}': data nesting does not match shape {}: it needs {} "
                               "values, the data holds fewer",
                               c.name, backends::shapeToString(c.shape), c.count));
  }
  return absl::OkStatus();
}

template <typename Leaf>
absl::Status walkData(const InputCtx& c, array data, Leaf& leaf) {
  if (isNested(c, data)) return walkNested(c, data, 0, leaf);
  const size_t n = arraySize(data);
  if (n != c.count) {
    return invalid(fmt::format("input '{}': expected {} elements for shape {}, got {}", c.name,
                               c.count, backends::shapeToString(c.shape), n));
  }
  for (element e : data) {
    ValueError r = leaf(e);
    if (r != ValueError::kOk) [[unlikely]] return leafStatus(c, r, e);
  }
  return absl::OkStatus();
}

// Parses `data` (already prechecked: precheckCount) into `dst`, c.count elements of datatype
// `Tag`: typed elements written straight where they will be read (a batch slot or Tensor::data).
template <class Tag>
absl::Status decodeFixedInto(const InputCtx& c, array data, uint8_t* dst) {
  constexpr size_t kSize = Tag::kSize;
  uint8_t* const end = dst + c.count * kSize;
  auto leaf = [&](element e) -> ValueError {
    if (dst == end) [[unlikely]] return ValueError::kNesting;  // unreachable: walk checks counts
    ValueError r = storeElement<Tag>(e, dst);
    dst += kSize;
    return r;
  };
  absl::Status s = walkData(c, data, leaf);
  if (!s.ok()) return s;
  if (dst != end) {
    return invalid(fmt::format("input '{}': expected {} elements for shape {}", c.name, c.count,
                               backends::shapeToString(c.shape)));
  }
  return absl::OkStatus();
}

// Pass 1 of a JSON BYTES input: checks element types and measures the layout (4-byte length +
// bytes per element).
absl::Status measureBytesJson(const InputCtx& c, array data, size_t& total) {
  absl::Status pre = precheckCount(c, data);
  if (!pre.ok()) return pre;
  total = 0;
  auto measure = [&](element e) -> ValueError {
    std::string_view s;
    if (e.type() == element_type::ARRAY) return ValueError::kNesting;
    if (e.get_string().get(s)) return ValueError::kWrongType;
    total += 4 + s.size();
    return ValueError::kOk;
  };
  return walkData(c, data, measure);
}

// Pass 2: writes the layout measured by measureBytesJson into `dst`.
absl::Status writeBytesJson(const InputCtx& c, array data, uint8_t* dst) {
  auto write = [&](element e) -> ValueError {
    std::string_view s;
    if (e.get_string().get(s)) return ValueError::kWrongType;  // checked in pass 1
    dst = writeBytesElement(dst, s);
    return ValueError::kOk;
  };
  return walkData(c, data, write);
}

// Writes the elements of JSON `data` into `dst` (sized by the header pass).
absl::Status writeJsonData(const InputCtx& c, array data, uint8_t* dst) {
  return backends::visitDataType(c.dtype, [&](auto tag) {
    if constexpr (decltype(tag)::kIsBytes) {
      return writeBytesJson(c, data, dst);
    } else {
      return decodeFixedInto<decltype(tag)>(c, data, dst);
    }
  });
}

absl::Status binaryOverrun(std::string_view name, uint64_t n, uint64_t rest) {
  return invalid(fmt::format("input '{}': binary_data_size {} exceeds the remaining {} bytes of "
                             "the request body",
                             name, n, rest));
}

absl::Status unclaimedBytes(uint64_t rest) {
  return invalid(fmt::format("{} bytes after the JSON header are not claimed by any input's "
                             "binary_data_size",
                             rest));
}

// Counts the elements of a BYTES buffer (4-byte LE length + bytes each); on a malformed layout
// returns false with `why` set.
bool scanBytesLayout(std::string_view buf, uint64_t& count, std::string& why) {
  count = 0;
  size_t pos = 0;
  while (pos < buf.size()) {
    const size_t left = buf.size() - pos;
    if (left < 4) {
      why = fmt::format("BYTES element {} has a truncated length prefix ({} bytes left)", count,
                        left);
      return false;
    }
    uint32_t len = 0;
    std::memcpy(&len, buf.data() + pos, 4);
    if (len > left - 4) {
      why = fmt::format("BYTES element {} declares {} bytes but only {} remain", count, len,
                        left - 4);
      return false;
    }
    pos += 4 + static_cast<size_t>(len);
    ++count;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Request structure.

struct BinaryCursor {
  bool enabled = false;  // an Inference-Header-Content-Length was given
  std::string_view rest;
  // Streaming (decodeInferHeader): the binary part arrives after the header pass. `rest` stays
  // empty; `rest_size` is its length when known (Content-Length), and the size checks against it
  // run as on the whole body; unknown (chunked): the most it may be (the body limit), and the
  // checks run at the end (finishInferHeader). Every binary input whose size check ran is
  // recorded in `pass->binary`.
  InferHeaderPass* pass = nullptr;
  bool length_known = true;
  uint64_t rest_size = 0;
  uint64_t restSize() const { return pass != nullptr ? rest_size : rest.size(); }
};

// Where an input's elements come from, found by the header pass; written after placement.
struct PendingInput {
  bool binary = false;    // `part` holds the bytes as they are laid out (binary extension, raw)
  std::string_view part;
  array data;             // JSON "data"
  uint64_t count = 0;
};
// Per input, in input order; inline for the usual few inputs (no allocation).
using PendingInputs = absl::InlinedVector<PendingInput, 4>;


// Header pass of one input: name, datatype, shape, the source of its elements and their size
// (Tensor::slot_bytes). Nothing is written yet.
absl::Status decodeInput(element el, size_t index, BinaryCursor& bin, Tensor& t,
                         PendingInput& pending) {
  object obj;
  if (el.get_object().get(obj)) {
    return invalid(fmt::format("input #{}: expected an object, got {}", index, describe(el)));
  }
  bool has_name = false, has_dtype = false, has_shape = false, has_data = false;
  std::string_view dtype_name;
  element shape_el, data_el, params_el;
  bool has_params = false;
  for (auto field : obj) {
    const std::string_view key = field.key;
    if (key == "name") {
      std::string_view name;
      if (field.value.get_string().get(name)) {
        return invalid(fmt::format("input #{}: 'name' must be a string", index));
      }
      t.name.assign(name);
      has_name = true;
    } else if (key == "datatype") {
      if (field.value.get_string().get(dtype_name)) {
        return invalid(fmt::format("input #{}: 'datatype' must be a string", index));
      }
      has_dtype = true;
    } else if (key == "shape") {
      shape_el = field.value;
      has_shape = true;
    } else if (key == "data") {
      data_el = field.value;
      has_data = true;
    } else if (key == "parameters") {
      params_el = field.value;
      has_params = true;
    }
  }
  if (!has_name) return invalid(fmt::format("input #{}: missing 'name'", index));
  const std::string& name = t.name;
  if (!has_dtype) return invalid(fmt::format("input '{}': missing 'datatype'", name));
  std::optional<DataType> dtype = backends::parseDataType(dtype_name);
  if (!dtype) {
    return invalid(fmt::format("input '{}': unknown datatype '{}'", name, dtype_name));
  }
  t.dtype = *dtype;
  if (!has_shape) return invalid(fmt::format("input '{}': missing 'shape'", name));
  array shape_arr;
  if (shape_el.get_array().get(shape_arr)) {
    return invalid(fmt::format("input '{}': 'shape' must be an array of integers, got {}", name,
                               describe(shape_el)));
  }
  t.shape.reserve(arraySize(shape_arr));
  for (element d : shape_arr) {
    if (d.type() == element_type::INT64) {
      int64_t v = 0;
      if (d.get_int64().get(v) || v < 0) {
        return invalid(fmt::format("input '{}': shape dimension {} is negative", name, v));
      }
      t.shape.push_back(v);
    } else if (d.type() == element_type::UINT64) {
      return invalid(fmt::format("input '{}': shape dimension {} is too large", name, describe(d)));
    } else {
      return invalid(fmt::format("input '{}': shape dimensions must be integers, got {}", name,
                                 describe(d)));
    }
  }
  std::optional<uint64_t> count = backends::elementCount(t.shape);
  if (!count) {
    return invalid(fmt::format("input '{}': shape {} has too many elements", name,
                               backends::shapeToString(t.shape)));
  }

  std::optional<uint64_t> binary_size;
  if (has_params) {
    object params;
    if (params_el.get_object().get(params)) {
      return invalid(fmt::format("input '{}': 'parameters' must be an object", name));
    }
    element bds;
    if (!params["binary_data_size"].get(bds)) {
      uint64_t n = 0;
      if (!getNonNegative(bds, n)) {
        return invalid(fmt::format("input '{}': binary_data_size must be a non-negative integer, "
                                   "got {}",
                                   name, describe(bds)));
      }
      binary_size = n;
    }
  }

  const size_t elem_size = backends::dataTypeSize(t.dtype);
  if (binary_size) {
    if (has_data) {
      return invalid(fmt::format("input '{}': has both 'data' and binary_data_size", name));
    }
    if (!bin.enabled) {
      return invalid(fmt::format("input '{}': has binary_data_size but the request has no "
                                 "Inference-Header-Content-Length header",
                                 name));
    }
    const uint64_t n = *binary_size;
    if (n > bin.restSize()) {
      if (bin.pass != nullptr && !bin.length_known) {
        // Over what the body may still hold (the body limit): the request is doomed, nothing
        // is placed; finishInferHeader finds the overrun the whole body gives.
        bin.pass->binary.push_back({static_cast<uint32_t>(index), n});
      }
      return binaryOverrun(name, n, bin.restSize());
    }
    if (bin.pass != nullptr) {
      // Streamed: the bytes come later. A BYTES layout is checked on its bytes: the caller
      // assembles the body and decodes it whole (needs_bytes).
      if (t.dtype == DataType::kBytes) {
        bin.pass->needs_bytes = true;
        return absl::OkStatus();
      }
      bin.pass->binary.push_back({static_cast<uint32_t>(index), n});
    }
    const std::string_view part = bin.pass != nullptr ? std::string_view() : bin.rest.substr(0, n);
    if (t.dtype == DataType::kBytes) {
      uint64_t got = 0;
      std::string why;
      if (!scanBytesLayout(part, got, why)) {
        return invalid(fmt::format("input '{}': binary data: {}", name, why));
      }
      if (got != *count) {
        return invalid(fmt::format("input '{}': binary data holds {} BYTES elements, shape {} "
                                   "needs {}",
                                   name, got, backends::shapeToString(t.shape), *count));
      }
    } else {
      uint64_t want = 0;
      const bool fits = checkedMul(*count, elem_size, want);
      if (!fits || want != n) {
        return invalid(fmt::format("input '{}': binary_data_size {} does not match shape {} of {} "
                                   "({} bytes)",
                                   name, n, backends::shapeToString(t.shape),
                                   backends::dataTypeName(t.dtype),
                                   fits ? fmt::format("{}", want) : std::string("too many")));
      }
    }
    pending.binary = true;
    pending.part = part;
    t.slot_bytes = static_cast<size_t>(n);
    if (bin.pass != nullptr) {
      bin.rest_size -= n;
    } else {
      bin.rest.remove_prefix(n);
    }
    return absl::OkStatus();
  }

  if (!has_data) return invalid(fmt::format("input '{}': missing 'data'", name));
  array data;
  if (data_el.get_array().get(data)) {
    return invalid(fmt::format("input '{}': 'data' must be an array, got {}", name,
                               describe(data_el)));
  }
  InputCtx ctx{name, t.dtype, t.shape, *count};
  pending.data = data;
  pending.count = *count;
  if (t.dtype == DataType::kBytes) return measureBytesJson(ctx, data, t.slot_bytes);
  absl::Status pre = precheckCount(ctx, data);
  if (!pre.ok()) return pre;
  uint64_t bytes = 0;
  if (!checkedMul(*count, elem_size, bytes) || bytes > kMaxJsonTensorBytes) {
    return invalid(fmt::format("input '{}': shape {} is too large for JSON data", name,
                               backends::shapeToString(t.shape)));
  }
  t.slot_bytes = static_cast<size_t>(bytes);
  return absl::OkStatus();
}

// Placement and write pass: asks `place` (when given) for slots, else sizes Tensor::data, then
// writes every input's elements once, into wherever they now live. `streamed`: the binary
// parts have not arrived; an unplaced one stays empty and grows as they come
// (frontend/streamed_tensor.h), never sized from the header's binary_data_size.
absl::Status placeAndWrite(InferRequest& req, PendingInputs& pending,
                           const backends::InputPlacer* place, bool streamed = false) {
  const bool placed = place != nullptr && *place && (*place)(req);
  for (size_t k = 0; k < req.inputs.size(); ++k) {
    Tensor& t = req.inputs[k];
    if (streamed && pending[k].binary) {
      streamed::begin(t);
      continue;
    }
    if (!placed) {
      t.data.resize(t.slot_bytes);
      t.slot_bytes = 0;
    }
    uint8_t* dst = t.mutableBytes();
    const PendingInput& p = pending[k];
    if (p.binary) {
      if (!p.part.empty()) std::memcpy(dst, p.part.data(), p.part.size());  // the one copy
      continue;
    }
    InputCtx ctx{t.name, t.dtype, t.shape, p.count};
    absl::Status s = writeJsonData(ctx, p.data, dst);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status decodeParameters(element el, InferRequest& req) {
  object params;
  if (el.get_object().get(params)) {
    return invalid("request 'parameters' must be an object");
  }
  for (auto field : params) {
    if (field.key == "binary_data_output") {
      if (field.value.get_bool().get(req.binary_data_output)) {
        return invalid(fmt::format("request parameter 'binary_data_output' must be a boolean, "
                                   "got {}",
                                   describe(field.value)));
      }
    } else if (field.key == "priority") {
      uint64_t v = 0;
      if (!getNonNegative(field.value, v) ||
          v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return invalid(fmt::format("request parameter 'priority' must be a non-negative integer, "
                                   "got {}",
                                   describe(field.value)));
      }
      req.priority = static_cast<int64_t>(v);
    } else if (field.key == "timeout") {
      if (!getNonNegative(field.value, req.timeout_us)) {
        return invalid(fmt::format("request parameter 'timeout' must be a non-negative integer "
                                   "(microseconds), got {}",
                                   describe(field.value)));
      }
    } else if (field.key == "sequence_id") {
      // Triton's sequence batcher (docs/BACKENDS.md "Sequences"): a non-zero integer or a
      // non-empty string (at most 256 bytes); 0 / "" mean no sequence, as in Triton.
      uint64_t v = 0;
      std::string_view str;
      if (getNonNegative(field.value, v) && req.sequence.setIntegerId(v)) {
        // an integer id, in SequenceParams' one range
      } else if (!field.value.get_string().get(str) && str.size() <= 256) {
        req.sequence.id.assign(str);
        req.sequence.id_is_string = true;
      } else {
        return invalid(fmt::format("request parameter 'sequence_id' must be an integer from 0 "
                                   "to 2^63-1 or a string of at most 256 bytes, got {}",
                                   describe(field.value)));
      }
    } else if (field.key == "sequence_start" || field.key == "sequence_end") {
      bool& flag = field.key == "sequence_start" ? req.sequence.start : req.sequence.end;
      if (field.value.get_bool().get(flag)) {
        return invalid(fmt::format("request parameter '{}' must be a boolean, got {}",
                                   std::string_view(field.key), describe(field.value)));
      }
    }
    // Other parameters (triton_*, custom) are not interpreted here.
  }
  return absl::OkStatus();
}

absl::Status decodeOutputs(element el, InferRequest& req) {
  array outs;
  if (el.get_array().get(outs)) return invalid("request 'outputs' must be an array");
  req.outputs.reserve(arraySize(outs));
  size_t index = 0;
  for (element o : outs) {
    object obj;
    if (o.get_object().get(obj)) {
      return invalid(fmt::format("output #{}: expected an object, got {}", index, describe(o)));
    }
    backends::RequestedOutput ro;
    bool has_name = false;
    for (auto field : obj) {
      if (field.key == "name") {
        std::string_view name;
        if (field.value.get_string().get(name)) {
          return invalid(fmt::format("output #{}: 'name' must be a string", index));
        }
        ro.name.assign(name);
        has_name = true;
      } else if (field.key == "parameters") {
        object params;
        if (field.value.get_object().get(params)) {
          return invalid(fmt::format("output #{}: 'parameters' must be an object", index));
        }
        element b;
        if (!params["binary_data"].get(b) && b.get_bool().get(ro.binary)) {
          return invalid(fmt::format("output #{}: binary_data must be a boolean, got {}", index,
                                     describe(b)));
        }
      }
    }
    if (!has_name) return invalid(fmt::format("output #{}: missing 'name'", index));
    req.outputs.push_back(std::move(ro));
    ++index;
  }
  return absl::OkStatus();
}

absl::Status decodeJsonRequest(element root, BinaryCursor& bin, InferRequest& req,
                               const backends::InputPlacer* place,
                               const InferAdmission* admit = nullptr) {
  object obj;
  if (root.get_object().get(obj)) return invalid("request body must be a JSON object");
  element inputs_el, outputs_el, params_el;
  bool has_inputs = false, has_outputs = false, has_params = false;
  for (auto field : obj) {
    if (field.key == "id") {
      std::string_view id;
      if (field.value.get_string().get(id)) {
        return invalid(fmt::format("request 'id' must be a string, got {}", describe(field.value)));
      }
      req.id.assign(id);
    } else if (field.key == "inputs") {
      inputs_el = field.value;
      has_inputs = true;
    } else if (field.key == "outputs") {
      outputs_el = field.value;
      has_outputs = true;
    } else if (field.key == "parameters") {
      params_el = field.value;
      has_params = true;
    }
  }
  if (has_params) {
    absl::Status s = decodeParameters(params_el, req);
    if (!s.ok()) return s;
  }
  if (!has_inputs) return invalid("request has no 'inputs'");
  array inputs;
  if (inputs_el.get_array().get(inputs)) return invalid("request 'inputs' must be an array");
  req.inputs.resize(arraySize(inputs));
  PendingInputs pending(req.inputs.size());
  size_t i = 0;
  for (element in : inputs) {
    absl::Status s = decodeInput(in, i, bin, req.inputs[i], pending[i]);
    if (!s.ok()) return s;
    if (bin.pass != nullptr && bin.pass->needs_bytes) return absl::OkStatus();
    ++i;
  }
  if (bin.pass != nullptr) {
    bin.pass->inputs_done = true;
    if (bin.length_known && bin.rest_size != 0) return unclaimedBytes(bin.rest_size);
  } else if (!bin.rest.empty()) {
    return unclaimedBytes(bin.rest.size());
  }
  if (has_outputs) {
    absl::Status s = decodeOutputs(outputs_el, req);
    if (!s.ok()) return s;
  }
  if (bin.pass != nullptr && admit != nullptr && *admit) {
    // Refuse before copying: nothing is placed or written for a refused request.
    absl::Status a = (*admit)(req);
    if (!a.ok()) {
      bin.pass->refused = std::move(a);
      return absl::OkStatus();
    }
  }
  return placeAndWrite(req, pending, place, bin.pass != nullptr);
}

// Inference-Header-Content-Length: 0 -- the body is the model's single input, batch 1.
// Streamed (`pass` set): the body of `body_size` bytes arrives later (`body` is empty); a BYTES
// input needs its bytes (pass->needs_bytes), and `admit` runs before placement.
absl::Status decodeRawBinary(std::string_view body, const backends::ModelConfig& model,
                             InferRequest& req, const backends::InputPlacer* place,
                             InferHeaderPass* pass = nullptr, uint64_t body_size = 0,
                             const InferAdmission* admit = nullptr) {
  if (pass == nullptr) body_size = body.size();
  if (model.inputs.size() != 1) {
    return invalid(fmt::format("a raw binary request (Inference-Header-Content-Length: 0) needs a "
                               "model with exactly one input; model '{}' has {}",
                               model.name, model.inputs.size()));
  }
  const backends::TensorSpec& spec = model.inputs[0];
  Tensor t;
  t.name = spec.name;
  t.dtype = spec.dtype;
  t.shape = model.fullShape(spec);
  if (model.max_batch_size > 0) t.shape[0] = 1;
  int var = -1;
  uint64_t fixed = 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] < 0) {
      if (var >= 0) {
        return invalid(fmt::format("raw binary request: input '{}' has shape {} with more than one "
                                   "variable dimension; send a JSON header with the shape",
                                   spec.name, backends::shapeToString(model.fullShape(spec))));
      }
      var = static_cast<int>(d);
    } else if (!checkedMul(fixed, static_cast<uint64_t>(t.shape[d]), fixed)) {
      return invalid(fmt::format("raw binary request: input '{}' shape is too large", spec.name));
    }
  }
  // Number of elements in the body.
  uint64_t elements = 0;
  const size_t elem_size = backends::dataTypeSize(t.dtype);
  if (t.dtype == DataType::kBytes) {
    if (pass != nullptr) {
      pass->needs_bytes = true;
      return absl::OkStatus();
    }
    std::string why;
    if (!scanBytesLayout(body, elements, why)) {
      return invalid(fmt::format("raw binary request: input '{}': {}", spec.name, why));
    }
  } else {
    if (body_size % elem_size != 0) {
      return invalid(fmt::format("raw binary request: body of {} bytes is not a whole number of "
                                 "{} elements for input '{}'",
                                 body_size, backends::dataTypeName(t.dtype), spec.name));
    }
    elements = body_size / elem_size;
  }
  if (var >= 0) {
    if (fixed == 0 ? elements != 0 : elements % fixed != 0) {
      return invalid(fmt::format("raw binary request: {} elements do not fill input '{}' of shape "
                                 "{}",
                                 elements, spec.name, backends::shapeToString(t.shape)));
    }
    t.shape[var] = fixed == 0 ? 0 : static_cast<int64_t>(elements / fixed);
  } else if (elements != fixed) {
    return invalid(fmt::format("raw binary request: input '{}' of shape {} needs {} elements, the "
                               "body holds {}",
                               spec.name, backends::shapeToString(t.shape), fixed, elements));
  }
  t.slot_bytes = static_cast<size_t>(body_size);
  req.inputs.push_back(std::move(t));
  req.binary_data_output = true;
  PendingInputs pending(1);
  pending[0].binary = true;
  pending[0].part = body;
  if (pass != nullptr) {
    pass->binary.push_back({0, body_size});
    pass->inputs_done = true;
    if (admit != nullptr && *admit) {
      absl::Status a = (*admit)(req);
      if (!a.ok()) {
        pass->refused = std::move(a);
        return absl::OkStatus();
      }
    }
  }
  return placeAndWrite(req, pending, place, pass != nullptr);
}

// ---------------------------------------------------------------------------------------------
// Encoding.

// Number writers: write at `p` (at least kMaxChars bytes available), return the end.
constexpr size_t kMaxChars = 32;  // longest: "-2.2250738585072014e-308" (24), int64 min (20)

template <typename T>
inline char* writeInt(char* p, T v) {
  return std::to_chars(p, p + kMaxChars, v).ptr;
}

template <typename F>
inline char* writeFloat(char* p, F v) {
  if (!std::isfinite(v)) {
    std::memcpy(p, "null", 4);
    return p + 4;
  }
  if (v == 0 && std::signbit(v)) {
    std::memcpy(p, "-0.0", 4);  // "-0" reads back as the integer 0 in most parsers (simdjson too)
    return p + 4;
  }
  char* end;
  if constexpr (std::is_same_v<F, float>) {
    end = toCharsShortest(p, v);  // the bytes of std::to_chars, faster
  } else {
    end = std::to_chars(p, p + kMaxChars, v).ptr;  // shortest round-trip
  }
  // The shortest form may be a long integer ("18446744073709552000"): beyond 2^53 a reader may
  // take it as an integer and round it twice, beyond 2^64 simdjson rejects it. Use exponent form.
  if (end - p > 16 && std::find_if(p, end, [](char c) { return c == '.' || c == 'e'; }) == end) {
    end = std::to_chars(p, p + kMaxChars, v, std::chars_format::scientific).ptr;
  }
  return end;
}

template <typename T>
inline void appendInt(std::string& out, T v) {
  char buf[kMaxChars];
  out.append(buf, writeInt(buf, v));
}

// Writes the elements comma-separated through a stack buffer, appended to `out` in chunks (no
// per-element string growth checks, no zero-filled worst-case resize).
template <typename T, typename Write>
void appendElements(std::string& out, const std::vector<uint8_t>& data, Write write) {
  const size_t n = data.size() / sizeof(T);
  char buf[8192];
  char* p = buf;
  const uint8_t* src = data.data();
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<size_t>(buf + sizeof buf - p) < kMaxChars + 1) {
      out.append(buf, p);
      p = buf;
    }
    if (i) *p++ = ',';
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    p = write(p, v);
  }
  out.append(buf, p);
}

char* writeBool(char* p, uint8_t v) {
  if (v) {
    std::memcpy(p, "true", 4);
    return p + 4;
  }
  std::memcpy(p, "false", 5);
  return p + 5;
}

// Elements are written as JSON strings with control characters escaped. An element that is not
// valid UTF-8 cannot be a JSON string as it is: it is written as Latin-1, every byte from 0x80
// up as \u00XX, so the response stays valid JSON (binary_data_output gives the exact bytes). A
// malformed layout (a backend bug) ends the list at the last whole element.
void appendBytesData(std::string& out, const std::vector<uint8_t>& d) {
  ElementReader elements(d.data(), d.size());
  std::string_view s;
  for (bool first = true; elements.nextBytes(s); first = false) {
    if (!first) out.push_back(',');
    appendJsonString(out, s, /*latin1=*/!simdjson::validate_utf8(s.data(), s.size()));
  }
}

void appendJsonData(std::string& out, const Tensor& t) {
  out.push_back('[');
  const auto& d = t.data;
  backends::visitDataType(t.dtype, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::Storage;
    if constexpr (Tag::kIsBytes) {
      appendBytesData(out, d);
    } else if constexpr (Tag::kIsBool) {
      appendElements<T>(out, d, writeBool);
    } else if constexpr (Tag::kIsInteger) {
      appendElements<T>(out, d, writeInt<T>);
    } else {
      appendElements<T>(out, d, [](char* p, T v) { return writeFloat(p, widenFloat<Tag>(v)); });
    }
  });
  out.push_back(']');
}

// Rough JSON size of a tensor's data, to size the body once.
size_t jsonSizeHint(const Tensor& t) {
  const size_t n = t.data.size();
  return backends::visitDataType(t.dtype, [n](auto tag) -> size_t {
    using Tag = decltype(tag);
    if constexpr (Tag::kIsBool) return n * 6;
    if constexpr (Tag::kIsBytes) return n + n / 2;
    if constexpr (Tag::kSize == 1) return n * 5;                 // UINT8, INT8
    if constexpr (Tag::kIsFloat && Tag::kSize == 2) return n * 7;  // FP16, BF16
    return n * 3;  // 4-8 byte types: up to ~3 chars per byte
  });
}

void appendShape(std::string& out, const std::vector<int64_t>& shape) {
  out.push_back('[');
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out.push_back(',');
    appendInt(out, shape[i]);
  }
  out.push_back(']');
}

void appendTensorHead(std::string& out, std::string_view name, DataType dtype,
                      const std::vector<int64_t>& shape) {
  out.append("{\"name\":");
  appendJsonString(out, name);
  out.append(",\"datatype\":\"");
  out.append(backends::dataTypeName(dtype));
  out.append("\",\"shape\":");
  appendShape(out, shape);
}

}  // namespace

absl::StatusOr<backends::InferRequest> decodeInferRequest(
    std::string_view body, std::optional<size_t> inference_header_length,
    const backends::ModelConfig& model, std::string_view model_name,
    std::string_view model_version) {
  return decodeInferRequest(body, inference_header_length, model, model_name, model_version,
                            nullptr);
}

namespace {

// The JSON header parse shared by both decoders. The parser copies the JSON into its own padded
// buffer (reused): the body view has no guaranteed padding, and that copy is of the JSON part
// only. `big` holds the parser of a header over kRetainedParserCapacity.
absl::Status parseJson(std::string_view json, std::optional<simdjson::dom::parser>& big,
                       element& root) {
  thread_local simdjson::dom::parser tl_parser;
  simdjson::dom::parser* parser = &tl_parser;
  if (json.size() > kRetainedParserCapacity) parser = &big.emplace();
  if (auto err = parser->parse(json.data(), json.size(), /*realloc_if_needed=*/true).get(root)) {
    return invalid(fmt::format("malformed JSON request body: {}", simdjson::error_message(err)));
  }
  return absl::OkStatus();
}

void initRequest(InferRequest& req, std::string_view model_name, std::string_view model_version) {
  req.model_name.assign(model_name);
  req.model_version.assign(model_version);
  req.protocol = net::Protocol::kHttpKserve;
}

}  // namespace

void decodeInferHeader(std::string_view json, uint64_t binary_bytes, bool length_known,
                       const backends::ModelConfig& model, std::string_view model_name,
                       std::string_view model_version, const InferAdmission* admit,
                       const backends::InputPlacer* place, InferRequest& req,
                       InferHeaderPass& pass) {
  initRequest(req, model_name, model_version);
  (void)model;
  BinaryCursor bin;
  bin.enabled = true;
  bin.pass = &pass;
  bin.length_known = length_known;
  bin.rest_size = binary_bytes;
  std::optional<simdjson::dom::parser> big_parser;
  element root;
  pass.error = parseJson(json, big_parser, root);
  if (!pass.error.ok()) return;
  pass.error = decodeJsonRequest(root, bin, req, place, admit);
  pass.error_after_inputs = pass.inputs_done;
}

void decodeRawBinaryHeader(uint64_t body_bytes, const backends::ModelConfig& model,
                           std::string_view model_name, std::string_view model_version,
                           const InferAdmission* admit, const backends::InputPlacer* place,
                           InferRequest& req, InferHeaderPass& pass) {
  initRequest(req, model_name, model_version);
  pass.error = decodeRawBinary({}, model, req, place, &pass, body_bytes, admit);
  pass.error_after_inputs = pass.inputs_done;
}

absl::Status finishInferHeader(const InferHeaderPass& pass, const InferRequest& req,
                               uint64_t received) {
  uint64_t rest = received;
  for (const InferHeaderPass::Binary& b : pass.binary) {
    if (b.size > rest) return binaryOverrun(req.inputs[b.input].name, b.size, rest);
    rest -= b.size;
  }
  if (!pass.error.ok() && !pass.error_after_inputs) return pass.error;
  if (rest != 0) return unclaimedBytes(rest);
  return pass.error;
}

absl::Status headerLengthExceedsBody(uint64_t header_length, uint64_t body_length) {
  return invalid(fmt::format("Inference-Header-Content-Length {} exceeds the body length {}",
                             header_length, body_length));
}

absl::StatusOr<backends::InferRequest> decodeInferRequest(
    std::string_view body, std::optional<size_t> inference_header_length,
    const backends::ModelConfig& model, std::string_view model_name,
    std::string_view model_version, const backends::InputPlacer* place) {
  InferRequest req;
  initRequest(req, model_name, model_version);

  std::string_view json = body;
  BinaryCursor bin;
  if (inference_header_length) {
    const size_t len = *inference_header_length;
    if (len > body.size()) return headerLengthExceedsBody(len, body.size());
    if (len == 0) {
      absl::Status s = decodeRawBinary(body, model, req, place);
      if (!s.ok()) return s;
      return req;
    }
    json = body.substr(0, len);
    bin.enabled = true;
    bin.rest = body.substr(len);
  }

  std::optional<simdjson::dom::parser> big_parser;
  element root;
  if (absl::Status s = parseJson(json, big_parser, root); !s.ok()) return s;
  absl::Status s = decodeJsonRequest(root, bin, req, place);
  if (!s.ok()) return s;
  return req;
}

EncodedInferResponse encodeInferResponse(const backends::InferResponse& response) {
  struct Selected {
    const Tensor* tensor;
    bool binary;
  };
  absl::InlinedVector<Selected, 4> selected;  // no allocation for up to 4 outputs
  if (!response.requested.empty()) {
    selected.reserve(response.requested.size());
    for (const backends::RequestedOutput& ro : response.requested) {
      for (const Tensor& t : response.outputs) {
        if (t.name == ro.name) {
          selected.push_back({&t, ro.binary || response.binary_data_output});
          break;
        }
      }
      // A requested output the backend did not produce is left out (validateRequest checked
      // it against the config).
    }
  } else {
    selected.reserve(response.outputs.size());
    for (const Tensor& t : response.outputs) selected.push_back({&t, response.binary_data_output});
  }

  size_t hint = 128 + response.model_name.size() + response.id.size();
  size_t binary_total = 0;
  for (const Selected& s : selected) {
    hint += 96 + s.tensor->name.size() + s.tensor->shape.size() * 8;
    if (s.binary) {
      binary_total += s.tensor->data.size();
    } else {
      hint += jsonSizeHint(*s.tensor);
    }
  }

  EncodedInferResponse enc;
  std::string& out = enc.body;
  out.reserve(hint + binary_total);
  out.append("{\"model_name\":");
  appendJsonString(out, response.model_name);
  out.append(",\"model_version\":");
  appendJsonString(out, response.model_version);
  if (!response.id.empty()) {
    out.append(",\"id\":");
    appendJsonString(out, response.id);
  }
  out.append(",\"outputs\":[");
  bool any_binary = false;
  for (size_t i = 0; i < selected.size(); ++i) {
    const Tensor& t = *selected[i].tensor;
    if (i) out.push_back(',');
    appendTensorHead(out, t.name, t.dtype, t.shape);
    if (selected[i].binary) {
      any_binary = true;
      out.append(",\"parameters\":{\"binary_data_size\":");
      appendInt(out, t.data.size());
      out.append("}}");
    } else {
      out.append(",\"data\":");
      appendJsonData(out, t);
      out.push_back('}');
    }
  }
  out.append("]}");
  if (any_binary) {
    enc.json_header_length = out.size();
    for (const Selected& s : selected) {
      if (!s.binary) continue;
      out.append(reinterpret_cast<const char*>(s.tensor->data.data()), s.tensor->data.size());
    }
  }
  return enc;
}

std::string encodeModelMetadata(const backends::ModelConfig& model) {
  std::string out;
  out.reserve(256);
  out.append("{\"name\":");
  appendJsonString(out, model.name);
  out.append(",\"versions\":[");
  appendJsonString(out, model.version);
  out.append("],\"platform\":");
  appendJsonString(out, model.platform);
  auto tensors = [&](const char* key, const std::vector<backends::TensorSpec>& specs) {
    out.append(",\"");
    out.append(key);
    out.append("\":[");
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i) out.push_back(',');
      appendTensorHead(out, specs[i].name, specs[i].dtype, model.fullShape(specs[i]));
      out.push_back('}');
    }
    out.push_back(']');
  };
  tensors("inputs", model.inputs);
  tensors("outputs", model.outputs);
  out.push_back('}');
  return out;
}

std::string encodeServerMetadata(std::string_view name, std::string_view version) {
  std::string out = "{\"name\":";
  appendJsonString(out, name);
  out.append(",\"version\":");
  appendJsonString(out, version);
  out.append(",\"extensions\":[\"binary_tensor_data\",\"parameters\",\"schedule_policy\"]}");
  return out;
}

}  // namespace infergate::frontend
