#include "frontend/tfserving_rest.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "backends/retry_after.h"
#include "common/clock.h"
#include "fmt/format.h"
#include "frontend/encode_guard.h"
#include "frontend/http.h"
#include "frontend/status_map.h"
#include "frontend/tensor_json.h"
#include "net/session.h"
#include "simdjson.h"

namespace infergate::frontend {
namespace {

using namespace tensor_json;  // DataType, ValueError, ElementReader, the simdjson DOM types
using net::Protocol;

// Marker strings standing for the non-finite tokens (a NUL first: no real JSON text sends it
// unescaped, and a client string "\u0000..." for a float input is an error anyway).
constexpr std::string_view kMarkNan = std::string_view("\0NaN", 4);
constexpr std::string_view kMarkInf = std::string_view("\0Inf", 4);
constexpr std::string_view kMarkNegInf = std::string_view("\0-Inf", 5);

absl::Status invalid(std::string msg) { return absl::InvalidArgumentError(msg); }

bool isIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool isB64Object(element e, std::string_view* value) {
  object o;
  if (e.get(o) != simdjson::SUCCESS || o.size() != 1) return false;
  std::string_view s;
  if (o["b64"].get(s) != simdjson::SUCCESS) return false;
  *value = s;
  return true;
}

// Computes the shape of a nested list (first element at each depth).
void shapeOf(element e, std::vector<int64_t>& shape) {
  while (e.type() == element_type::ARRAY) {
    array a = e.get_array().value_unsafe();
    shape.push_back(static_cast<int64_t>(a.size()));
    if (a.size() == 0) return;
    e = *a.begin();
  }
}

// Walks an input's JSON values in element order. Two passes over the same values
// (docs/BATCHING.md "One copy"): measuring (`dst` null: every check, the bytes counted, nothing
// written), then, once the inputs are placed, writing the elements straight into `dst` (the
// batch slot or Tensor::data, `cap` bytes: the measured size).
class Writer {
 public:
  Writer(const std::string& input, DataType dtype, uint8_t* dst = nullptr, size_t cap = 0)
      : input_(input), dtype_(dtype), dst_(dst), cap_(cap) {}

  size_t size() const { return size_; }

  // Writes the elements of `e`, which must have shape shape[depth..].
  absl::Status write(element e, const std::vector<int64_t>& shape, size_t depth) {
    if (depth < shape.size()) {
      array a;
      if (e.get(a) != simdjson::SUCCESS || static_cast<int64_t>(a.size()) != shape[depth]) {
        return invalid(fmt::format(
            "input '{}': ragged or mis-shaped list: expected a list of {} at depth {}", input_,
            shape[depth], depth));
      }
      for (element c : a) {
        if (absl::Status s = write(c, shape, depth + 1); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (e.type() == element_type::ARRAY) {
      return invalid(fmt::format("input '{}': ragged list: unexpected list at depth {}", input_,
                                 depth));
    }
    return scalar(e);
  }

 private:
  // The measure pass counts; the write pass stays within the measured size (the same walk
  // over the same values cannot write more; checked all the same).
  bool reserve(size_t n) {
    if (dst_ != nullptr && (n > cap_ || size_ > cap_ - n)) return false;
    return true;
  }
  template <typename T>
  absl::Status put(T v) {
    if (!reserve(sizeof(T))) return overrun();
    if (dst_ != nullptr) std::memcpy(dst_ + size_, &v, sizeof(T));
    size_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status putBytes(std::string_view s) {
    if (!reserve(4 + s.size())) return overrun();
    if (dst_ != nullptr) writeBytesElement(dst_ + size_, s);
    size_ += 4 + s.size();
    return absl::OkStatus();
  }
  absl::Status overrun() {
    return absl::InternalError(fmt::format("input '{}': write past the measured size", input_));
  }

  absl::Status typeError(element e, std::string_view want) {
    return invalid(fmt::format("input '{}': expected {} for datatype {}, got {}", input_, want,
                               backends::dataTypeName(dtype_),
                               std::string(simdjson::minify(e)).substr(0, 64)));
  }

  absl::Status floatValue(element e, double* v) {
    switch (e.type()) {
      case element_type::INT64: *v = static_cast<double>(e.get_int64().value_unsafe()); return {};
      case element_type::UINT64: *v = static_cast<double>(e.get_uint64().value_unsafe()); return {};
      case element_type::DOUBLE: *v = e.get_double().value_unsafe(); return {};
      case element_type::STRING: {
        std::string_view s = e.get_string().value_unsafe();
        if (s == kMarkNan) { *v = std::numeric_limits<double>::quiet_NaN(); return {}; }
        if (s == kMarkInf) { *v = std::numeric_limits<double>::infinity(); return {}; }
        if (s == kMarkNegInf) { *v = -std::numeric_limits<double>::infinity(); return {}; }
        break;
      }
      default: break;
    }
    return typeError(e, "a number");
  }

  // TF Serving's wording: a value of the wrong type or sign is a type error; an integer beyond
  // the datatype's range is out of range.
  template <typename T>
  absl::Status integer(element e) {
    T v;
    const ValueError r = readInteger(e, v);
    if (r == ValueError::kOk) return put(v);
    const bool typed_int64 = e.type() == element_type::INT64;
    if constexpr (std::is_signed_v<T>) {
      if (r == ValueError::kOutOfRange && typed_int64) {
        return outOfRange(e.get_int64().value_unsafe());
      }
      return typeError(e, "an integer");
    } else {
      if (r == ValueError::kOutOfRange && !(typed_int64 && e.get_int64().value_unsafe() < 0)) {
        return outOfRange(e.get_uint64().value_unsafe());
      }
      return typeError(e, "a non-negative integer");
    }
  }

  template <typename V>
  absl::Status outOfRange(V v) {
    return invalid(fmt::format("input '{}': {} is out of range for {}", input_, v,
                               backends::dataTypeName(dtype_)));
  }

  absl::Status scalar(element e) {
    return backends::visitDataType(dtype_, [&](auto tag) -> absl::Status {
      using Tag = decltype(tag);
      if constexpr (Tag::kIsBool) {
        bool b;
        if (e.get(b) != simdjson::SUCCESS) return typeError(e, "true or false");
        return put<uint8_t>(b ? 1 : 0);
      } else if constexpr (Tag::kIsInteger) {
        return integer<typename Tag::Storage>(e);
      } else if constexpr (Tag::kIsFloat) {
        double v;
        if (absl::Status s = floatValue(e, &v); !s.ok()) return s;
        // FP32 and FP16 refuse a finite value beyond float's range (as TF Serving's float
        // parse does); FP16 may still round to infinity, BF16 and FP64 take any value.
        if constexpr (Tag::value == DataType::kFp32 || Tag::value == DataType::kFp16) {
          if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max()) {
            return outOfRange(v);
          }
        }
        return put(narrowFloat<Tag>(v));
      } else {
        std::string_view s;
        if (isB64Object(e, &s)) {
          // Decoded into a scratch buffer (reused), then written: absl has no decode into a
          // caller's memory.
          if (!absl::Base64Unescape(absl::string_view(s.data(), s.size()), &decoded_)) {
            return invalid(fmt::format("input '{}': invalid base64 in \"b64\"", input_));
          }
          s = decoded_;
        } else if (e.get(s) != simdjson::SUCCESS || (!s.empty() && s[0] == '\0')) {
          return typeError(e, "a string or {\"b64\": ...}");
        }
        return putBytes(s);
      }
      return absl::OkStatus();
    });
  }

  const std::string& input_;
  DataType dtype_;
  uint8_t* dst_;
  size_t cap_;
  size_t size_ = 0;
  std::string decoded_;
};

const backends::TensorSpec* findInput(const backends::ModelConfig& model, std::string_view name) {
  for (const backends::TensorSpec& s : model.inputs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// One input of a :predict body: the tensor's header (name, dtype, shape, slot_bytes) from the
// first pass, and where its values are for the write pass.
struct PendingTensor {
  backends::Tensor t;
  element value;                // columnar: the (nested) value
  std::vector<element> rows;    // row format: the input's value in every instance
  std::vector<int64_t> inner;   // row format: one instance's shape
  bool row = false;
};

// Columnar: one tensor from one (nested) value. The shape (read off the first element at
// each depth) is checked against the model (checkInputShape: datatype, dimensions, an element
// count and byte size that fit, with checked arithmetic) before any value is read; then every
// value is checked and the bytes measured (nothing written: that waits for the placement).
absl::Status columnTensor(const backends::ModelConfig& model, const backends::TensorSpec& spec,
                          element value, PendingTensor& p) {
  backends::Tensor& out = p.t;
  out.name = spec.name;
  out.dtype = spec.dtype;
  std::string_view b64;
  if (!isB64Object(value, &b64) && value.type() == element_type::OBJECT) {
    return invalid(fmt::format("input '{}': expected a value or a list, got an object", spec.name));
  }
  shapeOf(value, out.shape);
  if (absl::Status st = backends::checkInputShape(model, spec, spec.dtype, out.shape); !st.ok()) {
    return st;
  }
  p.value = value;
  Writer w(spec.name, spec.dtype);
  if (absl::Status st = w.write(value, out.shape, 0); !st.ok()) return st;
  out.slot_bytes = w.size();
  return absl::OkStatus();
}

// Row: one tensor from the same input of every instance; checked and measured as columnTensor.
absl::Status rowTensor(const backends::ModelConfig& model, const backends::TensorSpec& spec,
                       std::vector<element> values, PendingTensor& p) {
  backends::Tensor& out = p.t;
  out.name = spec.name;
  out.dtype = spec.dtype;
  out.shape.push_back(static_cast<int64_t>(values.size()));
  shapeOf(values.front(), p.inner);
  out.shape.insert(out.shape.end(), p.inner.begin(), p.inner.end());
  if (absl::Status st = backends::checkInputShape(model, spec, spec.dtype, out.shape); !st.ok()) {
    return st;
  }
  p.row = true;
  p.rows = std::move(values);
  Writer w(spec.name, spec.dtype);
  for (element v : p.rows) {
    std::string_view b64;
    if (!isB64Object(v, &b64) && v.type() == element_type::OBJECT) {
      return invalid(fmt::format("input '{}': expected a value or a list, got an object",
                                 spec.name));
    }
    if (absl::Status s = w.write(v, p.inner, 0); !s.ok()) {
      return invalid(fmt::format(
          "{} (every instance must have the same shape for input '{}')", std::string(s.message()), spec.name));
    }
  }
  out.slot_bytes = w.size();
  return absl::OkStatus();
}

// The write pass of one measured input into its slot (or Tensor::data).
absl::Status writeTensor(const PendingTensor& p, backends::Tensor& t) {
  Writer w(t.name, t.dtype, t.mutableBytes(), t.byteSize());
  if (!p.row) return w.write(p.value, t.shape, 0);
  for (element v : p.rows) {
    if (absl::Status s = w.write(v, p.inner, 0); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---- response encoding ----

void appendFloat(std::string& out, double v, bool is_float32) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v < 0 ? "-Infinity" : "Infinity";
  } else if (is_float32) {
    fmt::format_to(std::back_inserter(out), "{}", static_cast<float>(v));
  } else {
    fmt::format_to(std::back_inserter(out), "{}", v);
  }
}

class OutputEncoder {
 public:
  explicit OutputEncoder(const backends::Tensor& t)
      : t_(t), elements_(t.bytes(), t.byteSize()) {}

  // Writes the sub-tensor starting at element offset implied by the cursor, with shape
  // shape[depth..]; elements are consumed in order.
  bool write(std::string& out, size_t depth) {
    if (depth < t_.shape.size()) {
      out += '[';
      for (int64_t i = 0; i < t_.shape[depth]; ++i) {
        if (i) out += ',';
        if (!write(out, depth + 1)) return false;
      }
      out += ']';
      return true;
    }
    return scalar(out);
  }

 private:
  bool scalar(std::string& out) {
    return backends::visitDataType(t_.dtype, [&](auto tag) {
      using Tag = decltype(tag);
      if constexpr (Tag::kIsBytes) {
        std::string_view s;
        if (!elements_.nextBytes(s)) return false;
        if (simdjson::validate_utf8(s.data(), s.size())) {
          appendJsonString(out, s);
        } else {
          out += "{\"b64\":";
          appendJsonString(out, absl::Base64Escape(absl::string_view(s.data(), s.size())));
          out += '}';
        }
      } else {
        typename Tag::Storage v;
        if (!elements_.next(v)) return false;
        if constexpr (Tag::kIsBool) {
          out += v ? "true" : "false";
        } else if constexpr (Tag::kIsInteger) {
          fmt::format_to(std::back_inserter(out), "{}", v);
        } else {
          appendFloat(out, widenFloat<Tag>(v), Tag::value != DataType::kFp64);
        }
      }
      return true;
    });
  }

  const backends::Tensor& t_;
  ElementReader elements_;
};

// The next value of each output at `depth` (0: the whole tensor; 1: its next batch row): the
// value itself for a single output, else an object of named values. Returns the index of an
// output whose data does not match its shape, or -1.
int appendOutputValues(std::string& body, const std::vector<const backends::Tensor*>& outs,
                       std::vector<OutputEncoder>& encs, size_t depth) {
  if (outs.size() == 1) return encs[0].write(body, depth) ? -1 : 0;
  body += '{';
  for (size_t i = 0; i < outs.size(); ++i) {
    if (i) body += ',';
    appendJsonString(body, outs[i]->name);
    body += ':';
    if (!encs[i].write(body, depth)) return static_cast<int>(i);
  }
  body += '}';
  return -1;
}

HttpResponse jsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// "/v1/models/NAME[/versions/V][:VERB]"
struct TfPath {
  std::string_view name, version, verb;
};
bool parseTfPath(std::string_view path, TfPath& out) {
  constexpr std::string_view kPrefix = "/v1/models/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view rest = path.substr(kPrefix.size());
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos) {
    out.verb = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  const size_t slash = rest.find('/');
  out.name = rest.substr(0, slash);
  if (out.name.empty()) return false;
  if (slash != std::string_view::npos) {
    std::string_view tail = rest.substr(slash + 1);
    constexpr std::string_view kVersions = "versions/";
    if (tail.substr(0, kVersions.size()) != kVersions) return false;
    out.version = tail.substr(kVersions.size());
    if (out.version.empty() || out.version.find('/') != std::string_view::npos) return false;
  }
  return true;
}

}  // namespace

bool rewriteNonFiniteTokens(std::string_view json, std::string& out) {
  struct Token {
    std::string_view text, marker;
  };
  // Longest first (Infinity before Inf).
  static constexpr Token kTokens[] = {
      {"-Infinity", kMarkNegInf}, {"Infinity", kMarkInf}, {"-Inf", kMarkNegInf},
      {"Inf", kMarkInf},          {"-NaN", kMarkNan},     {"NaN", kMarkNan},
  };
  bool in_string = false;
  bool changed = false;
  size_t copied = 0;  // json[0, copied) is already in `out` (when changed)
  std::string result;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != 'N' && c != 'I' && c != '-') continue;
    if (i > 0 && isIdentChar(json[i - 1])) continue;
    for (const Token& t : kTokens) {
      if (json.substr(i, t.text.size()) != t.text) continue;
      const size_t after = i + t.text.size();
      if (after < json.size() && isIdentChar(json[after])) continue;
      if (!changed) {
        result.reserve(json.size() + 64);
        changed = true;
      }
      result.append(json.substr(copied, i - copied));
      result += '"';
      // The marker's NUL is written escaped (JSON strings cannot hold a raw control char).
      result += "\\u0000";
      result.append(t.marker.substr(1));
      result += '"';
      copied = after;
      i = after - 1;
      break;
    }
  }
  if (!changed) return false;
  result.append(json.substr(copied));
  out = std::move(result);
  return true;
}

absl::StatusOr<backends::InferRequest> decodeTfPredictRequest(std::string_view body,
                                                             const backends::ModelConfig& model,
                                                             TfPredictFormat* format,
                                                             const backends::InputPlacer* place) {
  std::string rewritten;
  if (rewriteNonFiniteTokens(body, rewritten)) body = rewritten;
  thread_local simdjson::dom::parser tl_parser;
  std::optional<simdjson::dom::parser> big_parser;
  simdjson::dom::parser* parser = &tl_parser;
  if (body.size() > (1u << 20)) parser = &big_parser.emplace();
  element root;
  if (auto err = parser->parse(body.data(), body.size(), true).get(root)) {
    return invalid(fmt::format("JSON Parse error: {}", simdjson::error_message(err)));
  }
  object top;
  if (root.get(top) != simdjson::SUCCESS) {
    return invalid("JSON Value: " + std::string(simdjson::minify(root)).substr(0, 64) +
                   " Is not object");
  }
  element instances, inputs;
  const bool has_instances = top["instances"].get(instances) == simdjson::SUCCESS;
  const bool has_inputs = top["inputs"].get(inputs) == simdjson::SUCCESS;
  if (has_instances == has_inputs) {
    return invalid(has_inputs
                       ? "Not formatted correctly expecting only one of 'inputs' or 'instances' "
                         "keys exists"
                       : "Missing 'inputs' or 'instances' key");
  }
  backends::InferRequest req;
  req.protocol = Protocol::kHttpTfServing;
  req.model_name = model.name;
  std::vector<PendingTensor> tensors;
  auto unknownInput = [&](std::string_view name) {
    return invalid(fmt::format("input '{}' is not an input of model '{}'", name, model.name));
  };

  if (has_inputs) {
    *format = TfPredictFormat::kColumnar;
    std::string_view b64;
    object named;
    if (!isB64Object(inputs, &b64) && inputs.get(named) == simdjson::SUCCESS) {
      for (auto field : named) {
        const backends::TensorSpec* spec = findInput(model, field.key);
        if (spec == nullptr) return unknownInput(field.key);
        if (absl::Status s = columnTensor(model, *spec, field.value, tensors.emplace_back()); !s.ok()) {
          return s;
        }
      }
    } else {
      if (model.inputs.size() != 1) {
        return invalid(fmt::format(
            "model '{}' has {} inputs: \"inputs\" must be an object of named tensors",
            model.name, model.inputs.size()));
      }
      if (absl::Status s = columnTensor(model, model.inputs[0], inputs, tensors.emplace_back());
          !s.ok()) {
        return s;
      }
    }
  } else {
    *format = TfPredictFormat::kRow;
    array rows;
    if (instances.get(rows) != simdjson::SUCCESS) {
      return invalid("Expecting 'instances' to be an list/array");
    }
    if (rows.size() == 0) return invalid("No instances in the request");
    std::string_view b64;
    element first = *rows.begin();
    const bool named = first.type() == element_type::OBJECT && !isB64Object(first, &b64);
    if (named) {
      object f = first.get_object().value_unsafe();
      for (auto field : f) {
        const backends::TensorSpec* spec = findInput(model, field.key);
        if (spec == nullptr) return unknownInput(field.key);
        std::vector<element> values;
        values.reserve(rows.size());
        for (element row : rows) {
          object o;
          element v;
          if (row.get(o) != simdjson::SUCCESS || isB64Object(row, &b64)) {
            return invalid("Expecting object but got list at item 0 of input list");
          }
          if (o.size() != f.size() || o[field.key].get(v) != simdjson::SUCCESS) {
            return invalid(fmt::format(
                "Failed to process element: input '{}' missing or instances with different "
                "keys", field.key));
          }
          values.push_back(v);
        }
        if (absl::Status s = rowTensor(model, *spec, std::move(values), tensors.emplace_back());
            !s.ok()) {
          return s;
        }
      }
    } else {
      if (model.inputs.size() != 1) {
        return invalid(fmt::format(
            "model '{}' has {} inputs: each instance must be an object of named inputs",
            model.name, model.inputs.size()));
      }
      std::vector<element> values;
      values.reserve(rows.size());
      for (element row : rows) {
        if (row.type() == element_type::OBJECT && !isB64Object(row, &b64)) {
          return invalid("Expecting value/list but got object as an instance");
        }
        values.push_back(row);
      }
      if (absl::Status s = rowTensor(model, model.inputs[0], std::move(values),
                                     tensors.emplace_back());
          !s.ok()) {
        return s;
      }
    }
  }
  // Inputs in the model's order; duplicates (a JSON object with a repeated key) refused.
  std::vector<const PendingTensor*> order;
  order.reserve(tensors.size());
  for (const backends::TensorSpec& spec : model.inputs) {
    int seen = 0;
    for (PendingTensor& p : tensors) {
      if (p.t.name != spec.name) continue;
      if (++seen == 1) {
        req.inputs.push_back(std::move(p.t));
        order.push_back(&p);
      }
    }
    if (seen > 1) return invalid(fmt::format("input '{}' given more than once", spec.name));
  }
  // Every value is checked and measured: place, then write each element once, straight from
  // the parsed document into the slot (else into Tensor::data).
  const bool placed = place != nullptr && *place && !req.inputs.empty() && (*place)(req);
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    backends::Tensor& t = req.inputs[i];
    if (!placed) {
      t.data.resize(t.slot_bytes);
      t.slot_bytes = 0;
    }
    if (absl::Status s = writeTensor(*order[i], t); !s.ok()) return s;
  }
  return req;
}

absl::StatusOr<std::string> encodeTfPredictResponse(const backends::InferResponse& response,
                                                    TfPredictFormat format) {
  std::vector<const backends::Tensor*> outs;
  for (const backends::Tensor& t : response.outputs) {
    bool want = response.requested.empty();
    for (const auto& ro : response.requested) want = want || ro.name == t.name;
    if (want) outs.push_back(&t);
  }
  std::string body;
  body.reserve(64);
  auto malformed = [](const backends::Tensor& t) {
    return absl::InternalError(
        fmt::format("output '{}': data does not match its shape", t.name));
  };
  std::vector<OutputEncoder> encs;
  encs.reserve(outs.size());
  for (const backends::Tensor* t : outs) encs.emplace_back(*t);
  if (format == TfPredictFormat::kColumnar) {
    body += "{\"outputs\":";
    if (const int bad = appendOutputValues(body, outs, encs, 0); bad >= 0) {
      return malformed(*outs[bad]);
    }
    body += '}';
    return body;
  }
  // Row format: every output must have the same leading (batch) dimension.
  int64_t rows = -1;
  for (const backends::Tensor* t : outs) {
    if (t->shape.empty()) {
      return invalid(fmt::format(
          "output '{}' has no batch dimension: use the columnar (\"inputs\") format", t->name));
    }
    if (rows >= 0 && t->shape[0] != rows) {
      return invalid(
          "Batch size mismatch between outputs: use the columnar (\"inputs\") format");
    }
    rows = t->shape[0];
  }
  body += "{\"predictions\":[";
  for (int64_t r = 0; r < std::max<int64_t>(rows, 0); ++r) {
    if (r) body += ',';
    if (const int bad = appendOutputValues(body, outs, encs, 1); bad >= 0) {
      return malformed(*outs[bad]);
    }
  }
  body += "]}";
  return body;
}

std::string encodeTfModelStatus(const backends::Model& model) {
  std::string body = "{\"model_version_status\":[{\"version\":";
  appendJsonString(body, model.config().version);
  body += model.ready() ? ",\"state\":\"AVAILABLE\"" : ",\"state\":\"LOADING\"";
  body += ",\"status\":{\"error_code\":\"OK\",\"error_message\":\"\"}}]}";
  return body;
}

TfServingRestHandler::TfServingRestHandler(const backends::ModelRegistry& registry,
                                           ServerMetrics* metrics)
    : registry_(registry), metrics_(metrics) {}

void TfServingRestHandler::handle(HttpRequest&& request, HttpRespond respond,
                                  std::shared_ptr<net::CancelToken> cancel) {
  const uint64_t start = request.received_ns;
  ServerMetrics* metrics = metrics_;
  auto finishWith = [metrics, start](HttpRespond& respond, int model_index, HttpResponse resp) {
    if (metrics != nullptr) {
      const uint64_t now = common::monotonicNs();
      metrics->recordRequest(model_index, Protocol::kHttpTfServing, resp.status,
                             start ? now - start : 0);
    }
    respond(std::move(resp));
  };
  auto fail = [&](int model_index, const absl::Status& st) {
    finishWith(respond, model_index, httpErrorResponse(st));
  };
  const std::string_view path = request.path();
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  TfPath tp;
  const bool parsed = parseTfPath(path, tp);
  const bool status_req = parsed && get && tp.verb.empty();
  const bool predict_req = parsed && post && !tp.verb.empty();
  if (!status_req && !predict_req) {
    return fail(-1, invalid(fmt::format("Malformed request: {} {}", request.method, path)));
  }
  if (!tp.version.empty()) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(tp.version.data(), tp.version.data() + tp.version.size(), v);
    if (ec != std::errc() || p != tp.version.data() + tp.version.size()) {
      return fail(-1, invalid(fmt::format("Failed to convert version: {} to numeric.",
                                          tp.version)));
    }
  }
  backends::Model* model = registry_.find(tp.name, tp.version);
  if (status_req) {
    if (model == nullptr) {
      return fail(-1, absl::NotFoundError(
                          tp.version.empty()
                              ? fmt::format("Could not find any versions of model {}", tp.name)
                              : fmt::format("Could not find version {} of model {}", tp.version,
                                            tp.name)));
    }
    const int idx = metrics != nullptr ? metrics->modelIndex(tp.name) : -1;
    return finishWith(respond, idx, jsonResponse(200, encodeTfModelStatus(*model)));
  }
  if (tp.verb != "predict") {
    if (tp.verb == "classify" || tp.verb == "regress") {
      return fail(-1, absl::UnimplementedError(
                          fmt::format("{} is not supported by infergate; use :predict", tp.verb)));
    }
    return fail(-1, invalid(fmt::format("Malformed request: {} {}", request.method, path)));
  }
  if (model == nullptr) {
    return fail(-1, absl::NotFoundError(fmt::format(
                        "Servable not found for request: {}",
                        tp.version.empty() ? fmt::format("Latest({})", tp.name)
                                           : fmt::format("Specific({}, {})", tp.name, tp.version))));
  }
  const int model_index = metrics != nullptr ? metrics->modelIndex(tp.name) : -1;
  if (request.tag && request.tag->refused()) {
    const bool limited = request.tag->verdict == net::IngressTag::Verdict::kRateLimited;
    return fail(
        model_index,
        backends::withRetryAfter(
            limited ? absl::ResourceExhaustedError("request rate limit exceeded for this client")
                    : absl::UnavailableError(
                          "server overloaded: only higher-priority requests are admitted"),
            1));
  }
  if (!model->ready()) {
    return fail(model_index,
                absl::UnavailableError("model '" + model->config().name + "' is not ready"));
  }
  // Refuse before copying: a request the queue would refuse is answered before its body is
  // parsed (TF Serving requests carry no priority: the default level).
  if (absl::Status st = model->admission(0); !st.ok()) return fail(model_index, st);
  const backends::ModelConfig& cfg = model->config();
  TfPredictFormat format = TfPredictFormat::kRow;
  const backends::InputPlacer place = [model](backends::InferRequest& r) {
    return model->placeInputs(r);
  };
  absl::StatusOr<backends::InferRequest> req =
      decodeTfPredictRequest(request.body, cfg, &format, &place);
  if (!req.ok()) return fail(model_index, req.status());
  req->model_version = std::string(tp.version);
  if (absl::Status st = backends::validateRequest(cfg, *req); !st.ok()) {
    return fail(model_index, st);
  }
  req->cancel = std::move(cancel);
  model->infer(std::move(*req), [finishWith, respond = std::move(respond), model_index, format](
                                    absl::StatusOr<backends::InferResponse> result) mutable {
    if (!result.ok()) {
      return finishWith(respond, model_index, httpErrorResponse(result.status()));
    }
    absl::StatusOr<std::string> body =
        encodeGuarded([&] { return encodeTfPredictResponse(*result, format); },
                      [](const absl::Status& st) { return absl::StatusOr<std::string>(st); });
    if (!body.ok()) {
      return finishWith(respond, model_index,
                        jsonResponse(httpStatusFor(body.status()),
                                     errorBody(std::string(body.status().message()))));
    }
    finishWith(respond, model_index, jsonResponse(200, std::move(*body)));
  });
}

}  // namespace infergate::frontend
