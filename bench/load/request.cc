#include "bench/load/request.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "grpc_service.pb.h"

namespace infergate::bench {
namespace {

absl::Status invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string shapeJson(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Raw element bytes of one tensor (random or from its file).
absl::StatusOr<std::string> tensorBytes(const TensorSpec& t, std::mt19937_64& rng) {
  const int size = datatypeSize(t.datatype);
  const int64_t n = elementCount(t.shape);
  if (!t.file.empty()) {
    std::ifstream in(t.file, std::ios::binary);
    if (!in) return invalid(fmt::format("input '{}': cannot read file '{}'", t.name, t.file));
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (size > 0 && static_cast<int64_t>(data.size()) != n * size) {
      return invalid(fmt::format("input '{}': file '{}' has {} bytes, the tensor {}x{} needs {}",
                                 t.name, t.file, data.size(), n, size, n * size));
    }
    if (size == 0) {  // BYTES: check the length prefixes cover the file and count n elements
      size_t pos = 0;
      int64_t count = 0;
      while (pos + 4 <= data.size()) {
        uint32_t len;
        std::memcpy(&len, data.data() + pos, 4);
        pos += 4 + len;
        ++count;
      }
      if (pos != data.size() || count != n) {
        return invalid(fmt::format("input '{}': file '{}' is not {} length-prefixed BYTES elements",
                                   t.name, t.file, n));
      }
    }
    return data;
  }
  std::string out;
  if (size == 0) {
    for (int64_t i = 0; i < n; ++i) {
      std::string e = fmt::format("s{}", rng() % 100000);
      uint32_t len = static_cast<uint32_t>(e.size());
      out.append(reinterpret_cast<const char*>(&len), 4);
      out += e;
    }
    return out;
  }
  out.resize(static_cast<size_t>(n * size));
  for (int64_t i = 0; i < n; ++i) {
    char* p = out.data() + i * size;
    const uint64_t r = rng();
    if (t.datatype == "FP32") {
      const float f = static_cast<float>(r % 2000001) / 1000.0f - 1000.0f;
      std::memcpy(p, &f, 4);
    } else if (t.datatype == "FP64") {
      const double d = static_cast<double>(r % 2000001) / 1000.0 - 1000.0;
      std::memcpy(p, &d, 8);
    } else if (t.datatype == "FP16") {
      const uint16_t h = static_cast<uint16_t>(r & 0x3BFF);  // finite, below 1.0
      std::memcpy(p, &h, 2);
    } else if (t.datatype == "BF16") {
      const uint16_t h = static_cast<uint16_t>(r & 0x3F7F);
      std::memcpy(p, &h, 2);
    } else if (t.datatype == "BOOL") {
      p[0] = static_cast<char>(r & 1);
    } else {
      std::memcpy(p, &r, static_cast<size_t>(size));
    }
  }
  return out;
}

// JSON array of the elements in `raw` (flat, row-major).
std::string jsonData(const TensorSpec& t, const std::string& raw) {
  const int size = datatypeSize(t.datatype);
  std::string s = "[";
  auto sep = [&](size_t i) {
    if (i) s += ',';
  };
  if (size == 0) {
    size_t pos = 0, i = 0;
    while (pos + 4 <= raw.size()) {
      uint32_t len;
      std::memcpy(&len, raw.data() + pos, 4);
      sep(i++);
      s += jsonString(raw.substr(pos + 4, len));
      pos += 4 + len;
    }
    return s + "]";
  }
  const size_t n = raw.size() / static_cast<size_t>(size);
  for (size_t i = 0; i < n; ++i) {
    const char* p = raw.data() + i * size;
    sep(i);
    const std::string& d = t.datatype;
    if (d == "FP32") {
      float f;
      std::memcpy(&f, p, 4);
      s += fmt::format("{}", f);
    } else if (d == "FP64") {
      double v;
      std::memcpy(&v, p, 8);
      s += fmt::format("{}", v);
    } else if (d == "FP16" || d == "BF16") {
      uint16_t h;
      std::memcpy(&h, p, 2);
      float f;
      if (d == "BF16") {
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&f, &bits, 4);
      } else {  // finite halves only (as generated); a file's specials become 0
        const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
        f = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                   : (e == 31 ? 0.0f : std::ldexp(static_cast<float>(m | 0x400), e - 25));
        if (h & 0x8000) f = -f;
      }
      s += fmt::format("{}", f);
    } else if (d == "BOOL") {
      s += p[0] ? "true" : "false";
    } else if (d == "INT8") {
      s += std::to_string(static_cast<int8_t>(p[0]));
    } else if (d == "UINT8") {
      s += std::to_string(static_cast<uint8_t>(p[0]));
    } else if (d == "INT16" || d == "UINT16") {
      uint16_t v;
      std::memcpy(&v, p, 2);
      s += d == "INT16" ? std::to_string(static_cast<int16_t>(v)) : std::to_string(v);
    } else if (d == "INT32" || d == "UINT32") {
      uint32_t v;
      std::memcpy(&v, p, 4);
      s += d == "INT32" ? std::to_string(static_cast<int32_t>(v)) : std::to_string(v);
    } else {  // INT64, UINT64
      uint64_t v;
      std::memcpy(&v, p, 8);
      s += d == "INT64" ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
    }
  }
  return s + "]";
}

std::string http1Request(const std::string& method, const std::string& path,
                         const std::string& version, const std::string& authority,
                         const std::string& content_type, const std::string& extra_headers,
                         const std::string& body) {
  std::string r = fmt::format("{} {} {}\r\nHost: {}\r\n", method, path, version, authority);
  if (!content_type.empty()) r += "Content-Type: " + content_type + "\r\n";
  r += extra_headers;
  if (method != "GET" || !body.empty()) r += fmt::format("Content-Length: {}\r\n", body.size());
  r += "\r\n";
  return r + body;
}

struct Encoded {
  std::vector<std::string> raw;  // per input
};

std::string restBody(const PayloadOptions& o, const Encoded& enc, int priority,
                     const std::string& malformed, std::string& extra_headers) {
  const bool binary = o.rest_format == RestFormat::kBinary;
  std::string head = "{";
  std::string params;
  if (priority >= 0) params += fmt::format("\"priority\":{}", priority);
  if (binary) params += std::string(params.empty() ? "" : ",") + "\"binary_data_output\":true";
  if (!params.empty()) head += "\"parameters\":{" + params + "},";
  head += "\"inputs\":[";
  std::string tail_bytes;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    const TensorSpec& t = o.inputs[i];
    std::vector<int64_t> shape = t.shape;
    if (malformed == "bad-shape" && i == 0) shape.back() += 1;  // data no longer fills the shape
    head += fmt::format("{}{{\"name\":\"{}\",\"shape\":{},\"datatype\":\"{}\"", i ? "," : "",
                        t.name, shapeJson(shape), t.datatype);
    if (binary) {
      head += fmt::format(",\"parameters\":{{\"binary_data_size\":{}}}}}", enc.raw[i].size());
      tail_bytes += enc.raw[i];
    } else {
      head += ",\"data\":" + jsonData(t, enc.raw[i]) + "}";
    }
  }
  head += "]";
  if (!o.outputs.empty()) {
    head += ",\"outputs\":[";
    for (size_t i = 0; i < o.outputs.size(); ++i) {
      head += fmt::format("{}{{\"name\":\"{}\"}}", i ? "," : "", o.outputs[i]);
    }
    head += "]";
  }
  head += "}";
  if (malformed == "bad-json") head.erase(head.size() - 2);  // truncated: unbalanced brackets
  if (binary) {
    extra_headers = fmt::format("Inference-Header-Content-Length: {}\r\n", head.size());
    return head + tail_bytes;
  }
  return head;
}

std::string grpcMessage(const PayloadOptions& o, const Encoded& enc, int priority,
                        const std::string& malformed) {
  std::string payload;
  if (malformed == "bad-proto") {
    payload = std::string("\x0a\xff\xff\xff\xff\x0f garbage", 14);  // length beyond the message
  } else {
    inference::ModelInferRequest req;
    req.set_model_name(malformed == "unknown-model" ? o.model + "-no-such-model" : o.model);
    if (!o.model_version.empty()) req.set_model_version(o.model_version);
    if (priority >= 0) (*req.mutable_parameters())["priority"].set_int64_param(priority);
    for (size_t i = 0; i < o.inputs.size(); ++i) {
      const TensorSpec& t = o.inputs[i];
      auto* in = req.add_inputs();
      in->set_name(t.name);
      in->set_datatype(t.datatype);
      for (size_t d = 0; d < t.shape.size(); ++d) {
        in->add_shape(t.shape[d] + (malformed == "bad-shape" && i == 0 && d + 1 == t.shape.size()));
      }
      req.add_raw_input_contents(enc.raw[i]);
    }
    for (const auto& name : o.outputs) req.add_outputs()->set_name(name);
    payload = req.SerializeAsString();
  }
  std::string msg(5, '\0');
  const uint32_t len = static_cast<uint32_t>(payload.size());
  msg[1] = static_cast<char>(len >> 24);
  msg[2] = static_cast<char>(len >> 16);
  msg[3] = static_cast<char>(len >> 8);
  msg[4] = static_cast<char>(len);
  return msg + payload;
}

}  // namespace

int datatypeSize(const std::string& d) {
  if (d == "BOOL" || d == "UINT8" || d == "INT8") return 1;
  if (d == "UINT16" || d == "INT16" || d == "FP16" || d == "BF16") return 2;
  if (d == "UINT32" || d == "INT32" || d == "FP32") return 4;
  if (d == "UINT64" || d == "INT64" || d == "FP64") return 8;
  if (d == "BYTES") return 0;
  return -1;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int64_t elementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<TensorSpec> parseTensorSpec(const std::string& text) {
  TensorSpec t;
  const size_t a = text.find(':');
  const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) {
    return invalid(fmt::format("input '{}': expected NAME:DATATYPE:DIMS, e.g. INPUT0:FP32:1x16",
                               text));
  }
  t.name = text.substr(0, a);
  t.datatype = text.substr(a + 1, b - a - 1);
  std::transform(t.datatype.begin(), t.datatype.end(), t.datatype.begin(), ::toupper);
  if (t.name.empty()) return invalid(fmt::format("input '{}': empty name", text));
  if (datatypeSize(t.datatype) < 0) {
    return invalid(fmt::format("input '{}': unknown datatype '{}'", text, t.datatype));
  }
  std::stringstream dims(text.substr(b + 1));
  std::string d;
  while (std::getline(dims, d, 'x')) {
    char* end = nullptr;
    const long long v = std::strtoll(d.c_str(), &end, 10);
    if (d.empty() || *end != '\0' || v <= 0 || v > (1 << 30)) {
      return invalid(fmt::format("input '{}': dimension '{}' is not a positive integer", text, d));
    }
    t.shape.push_back(v);
  }
  if (t.shape.empty()) return invalid(fmt::format("input '{}': no dimensions", text));
  if (elementCount(t.shape) > (int64_t{1} << 28)) {
    return invalid(fmt::format("input '{}': more than 2^28 elements", text));
  }
  return t;
}

const std::vector<std::string>& malformedKinds(Protocol p) {
  static const std::vector<std::string> rest = {"bad-json",   "bad-shape",  "unknown-model",
                                                "bad-method", "bad-path",   "bad-version"};
  static const std::vector<std::string> grpc = {"bad-proto", "bad-shape", "unknown-model",
                                                "bad-path"};
  static const std::vector<std::string> get = {"bad-method", "bad-path", "bad-version"};
  return p == Protocol::kRest ? rest : (p == Protocol::kGrpc ? grpc : get);
}

absl::StatusOr<std::vector<Variant>> buildVariants(const PayloadOptions& o,
                                                   const std::vector<int>& priorities,
                                                   const std::vector<std::string>& malformed) {
  const auto& kinds = malformedKinds(o.protocol);
  for (const auto& m : malformed) {
    if (std::find(kinds.begin(), kinds.end(), m) == kinds.end()) {
      std::string all;
      for (const auto& k : kinds) all += (all.empty() ? "" : ", ") + k;
      return invalid(fmt::format("unknown malformed kind '{}' for this protocol (one of: {})", m,
                                 all));
    }
  }
  Encoded enc;
  std::mt19937_64 rng(o.seed);
  if (o.protocol != Protocol::kGet) {
    if (o.inputs.empty()) return invalid("at least one --input is needed for inference requests");
    for (const auto& t : o.inputs) {
      auto raw = tensorBytes(t, rng);
      if (!raw.ok()) return raw.status();
      enc.raw.push_back(*std::move(raw));
    }
  }
  const std::string infer_path =
      o.path.empty() ? (o.model_version.empty()
                            ? fmt::format("/v2/models/{}/infer", o.model)
                            : fmt::format("/v2/models/{}/versions/{}/infer", o.model,
                                          o.model_version))
                     : o.path;
  const std::string get_path = o.path.empty() ? "/" : o.path;
  std::vector<Variant> out;
  auto make = [&](int priority, const std::string& m) {
    Variant v;
    v.priority = priority;
    v.malformed = m;
    if (o.protocol == Protocol::kGrpc) {
      v.grpc_path = m == "bad-path" ? "/inference.GRPCInferenceService/NoSuchMethod"
                                    : "/inference.GRPCInferenceService/ModelInfer";
      v.bytes = grpcMessage(o, enc, priority, m);
      return v;
    }
    const std::string method = m == "bad-method" ? "BREW" : (o.protocol == Protocol::kGet ? "GET" : "POST");
    const std::string version = m == "bad-version" ? "HTTP/9.1" : "HTTP/1.1";
    std::string path = o.protocol == Protocol::kGet ? get_path : infer_path;
    if (m == "bad-path") path = "/etc/passwd";
    if (m == "unknown-model") path = fmt::format("/v2/models/{}-no-such-model/infer", o.model);
    if (o.protocol == Protocol::kGet) {
      v.bytes = http1Request(method, path, version, o.authority, "", "", "");
    } else {
      std::string extra;
      const std::string body = restBody(o, enc, priority, m, extra);
      const std::string ctype =
          o.rest_format == RestFormat::kBinary ? "application/octet-stream" : "application/json";
      v.bytes = http1Request(method, path, version, o.authority, ctype, extra, body);
    }
    return v;
  };
  for (int p : priorities) out.push_back(make(p, ""));
  for (const auto& m : malformed) out.push_back(make(-1, m));
  return out;
}

RequestMix::RequestMix(std::vector<double> weights, size_t malformed_count,
                       double malformed_fraction)
    : malformed_count_(malformed_count),
      malformed_fraction_(malformed_count ? malformed_fraction : 0.0) {
  double total = 0;
  for (double w : weights) total += std::max(0.0, w);
  double acc = 0;
  for (double w : weights) {
    acc += total > 0 ? std::max(0.0, w) / total : 1.0 / static_cast<double>(weights.size());
    cumulative_.push_back(acc);
  }
  if (!cumulative_.empty()) cumulative_.back() = 1.0;
}

size_t RequestMix::pick(std::mt19937_64& rng) const {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (u < malformed_fraction_) {
    return cumulative_.size() + static_cast<size_t>(rng() % malformed_count_);
  }
  if (cumulative_.size() <= 1) return 0;
  const double w = (u - malformed_fraction_) / (1.0 - malformed_fraction_);
  return static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), w) -
                             cumulative_.begin()) -
         (w >= 1.0 ? 1 : 0);
}

}  // namespace infergate::bench
