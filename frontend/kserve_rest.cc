#include "frontend/kserve_rest.h"

#include <charconv>
#include <string_view>
#include <utility>

#include "backends/retry_after.h"
#include "common/clock.h"
#include "frontend/encode_guard.h"
#include "frontend/kserve_body_stream.h"
#include "frontend/kserve_json.h"
#include "frontend/tenants.h"
#include "frontend/tfserving_rest.h"
#include "net/session.h"

namespace infergate::frontend {
namespace {

using net::Protocol;

HttpResponse jsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse errorResponse(int status, std::string_view message) {
  return jsonResponse(status, errorBody(message));
}

// Splits "/v2/models/NAME[/versions/V][/SUFFIX]" into its parts; false when it is not a model
// path.
struct ModelPath {
  std::string_view name, version, suffix;  // suffix: "", "ready", "infer", other
};
bool parseModelPath(std::string_view path, ModelPath& out) {
  constexpr std::string_view kPrefix = "/v2/models/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view rest = path.substr(kPrefix.size());
  size_t slash = rest.find('/');
  out.name = rest.substr(0, slash);
  if (out.name.empty()) return false;
  rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  constexpr std::string_view kVersions = "versions/";
  if (rest.substr(0, kVersions.size()) == kVersions) {
    rest = rest.substr(kVersions.size());
    slash = rest.find('/');
    out.version = rest.substr(0, slash);
    if (out.version.empty()) return false;
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  }
  out.suffix = rest;
  return true;
}

std::optional<size_t> parseSize(std::string_view s) {
  size_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

absl::StatusOr<int64_t> resolvePriority(int64_t kserve_priority, const std::string* header,
                                        std::optional<int> tag_class, uint32_t levels,
                                        bool client_trusted) {
  if (!client_trusted) {
    kserve_priority = 0;
    header = nullptr;
  }
  if (kserve_priority > 0) return kserve_priority;
  if (header != nullptr) {
    int64_t v = 0;
    const char* b = header->data();
    const char* e = b + header->size();
    auto [p, ec] = std::from_chars(b, e, v);
    if (header->empty() || ec != std::errc() || p != e || v < 0) {
      return absl::InvalidArgumentError(
          std::string(kPriorityHeader) + " must be a non-negative integer, got '" +
          header->substr(0, 64) + "'");
    }
    if (v > 0) return v;
  }
  if (tag_class && levels > 0) {
    return static_cast<int64_t>(backends::levelOfPriorityClass(*tag_class, levels));
  }
  return int64_t{0};
}

KServeRestHandler::KServeRestHandler(const backends::ModelRegistry& registry, ServerInfo info,
                                     ServerMetrics* metrics)
    : registry_(registry), info_(std::move(info)), metrics_(metrics) {}

void KServeRestHandler::handle(HttpRequest&& request, HttpRespond respond) {
  const std::string_view path = request.path();
  if (TfServingRestHandler::handles(path)) {  // TF Serving REST (frontend/tfserving_rest.h)
    std::shared_ptr<net::CancelToken> cancel = std::move(request.cancel);
    return TfServingRestHandler(registry_, metrics_)
        .handle(std::move(request), std::move(respond), std::move(cancel));
  }
  if (request.handler_route != nullptr) {  // routed by startBody: POST .../infer of this model
    backends::Model& model = *static_cast<backends::Model*>(request.handler_route);
    const int model_index = metrics_ != nullptr ? metrics_->modelIndex(model.config().name) : -1;
    return infer(std::move(request), model, model_index, std::move(respond));
  }
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  const uint64_t start = request.received_ns;
  ServerMetrics* metrics = metrics_;
  auto finish = [&](int model_index, HttpResponse resp) {
    if (metrics != nullptr) {
      const uint64_t now = common::monotonicNs();
      metrics->recordRequest(model_index, Protocol::kHttpKserve, resp.status,
                             start ? now - start : 0);
    }
    respond(std::move(resp));
  };
  auto methodNotAllowed = [&](std::string_view allow) {
    HttpResponse r = errorResponse(405, "method " + request.method + " not allowed for " +
                                            std::string(path));
    r.headers.push_back({"Allow", std::string(allow)});
    finish(-1, std::move(r));
  };

  if (path == "/v2/health/live" || path == "/v2/health/ready") {
    if (!get) return methodNotAllowed("GET");
    const bool ok = path == "/v2/health/live" || registry_.allReady();
    return finish(-1, jsonResponse(ok ? 200 : 400, ""));
  }
  if (path == "/v2" || path == "/v2/") {
    if (!get) return methodNotAllowed("GET");
    return finish(-1, jsonResponse(200, encodeServerMetadata(info_.name, info_.version)));
  }
  ModelPath mp;
  if (!parseModelPath(path, mp)) {
    return finish(-1, errorResponse(404, "not found: " + std::string(path)));
  }
  backends::Model* model = registry_.find(mp.name, mp.version);
  if (model == nullptr) {
    std::string msg = "Request for unknown model: '" + std::string(mp.name) + "'";
    if (!mp.version.empty()) msg += " version '" + std::string(mp.version) + "'";
    return finish(-1, errorResponse(404, msg + " is not found"));
  }
  const int model_index = metrics != nullptr ? metrics->modelIndex(mp.name) : -1;
  if (mp.suffix.empty()) {
    if (!get) return methodNotAllowed("GET");
    return finish(model_index, jsonResponse(200, encodeModelMetadata(model->config())));
  }
  if (mp.suffix == "ready") {
    if (!get) return methodNotAllowed("GET");
    return finish(model_index, jsonResponse(model->ready() ? 200 : 400, ""));
  }
  if (mp.suffix == "infer") {
    if (!post) return methodNotAllowed("POST");
    return infer(std::move(request), *model, model_index, std::move(respond));
  }
  return finish(-1, errorResponse(404, "not found: " + std::string(path)));
}

std::unique_ptr<HttpBodyReader> KServeRestHandler::startBody(HttpRequest& head,
                                                              const HttpBodyInfo& body) {
  // The same routing handle() does; anything it would not decode is assembled as before.
  if (head.method != "POST") return nullptr;
  ModelPath mp;
  if (!parseModelPath(head.path(), mp) || mp.suffix != "infer") return nullptr;
  backends::Model* model = registry_.find(mp.name, mp.version);
  if (model == nullptr) return nullptr;
  head.handler_route = model;  // handle(): POST .../infer of this model, not routed again
  if (!model->ready() || (head.tag && head.tag->refused())) return nullptr;
  // One pass over the headers for the two this needs.
  const std::string* header_len_value = nullptr;
  const std::string* priority_value = nullptr;
  for (const HttpHeader& h : head.headers) {
    if (header_len_value == nullptr && h.name == "inference-header-content-length") {
      header_len_value = &h.value;
    } else if (priority_value == nullptr && h.name == kPriorityHeader) {
      priority_value = &h.value;
    }
  }
  const uint32_t levels = model->priorityLevels();
  auto fallbackPriority = [&] {
    return resolvePriority(0, priority_value,
                           head.tag ? std::optional<int>(head.tag->priority_class) : std::nullopt,
                           levels, head.priority_trusted);
  };
  std::optional<size_t> header_len;
  if (header_len_value != nullptr) {
    header_len = parseSize(*header_len_value);
    if (!header_len) return nullptr;  // handle() answers 400
    KServeBodyStream::Priority prio;
    prio.trusted = head.priority_trusted;
    prio.fallback = fallbackPriority();
    if (*header_len > 0) {
      return KServeBodyStream::binary(*model, *header_len, body.content_length, body.max_body,
                                      std::move(prio));
    }
    if (body.content_length) {
      if (std::unique_ptr<KServeBodyStream> s =
              KServeBodyStream::raw(*model, *body.content_length, prio)) {
        return s;
      }
    }
  }
  // Assembled (JSON, or a raw body of unknown length or of BYTES): still refused before the
  // body is buffered. A model without priority levels ignores the priority; a JSON body's own
  // "priority" parameter may raise a trusted client's, so that client is checked at the highest
  // level (1).
  int64_t level = 0;
  if (levels > 0) {
    if (head.priority_trusted && !header_len) {
      level = 1;
    } else {
      absl::StatusOr<int64_t> p = fallbackPriority();
      if (!p.ok()) return nullptr;  // handle() answers the bad header
      level = *p;
    }
  }
  if (absl::Status st = model->admission(level); !st.ok()) {
    return KServeBodyStream::refusal(std::move(st));
  }
  return nullptr;
}

void KServeRestHandler::infer(HttpRequest&& request, backends::Model& model, int model_index,
                              HttpRespond respond) {
  const uint64_t start = request.received_ns;
  ServerMetrics* metrics = metrics_;
  auto finish = [metrics, model_index, start, respond = std::move(respond)](HttpResponse resp) {
    if (metrics != nullptr) {
      const uint64_t now = common::monotonicNs();
      metrics->recordRequest(model_index, Protocol::kHttpKserve, resp.status,
                             start ? now - start : 0);
    }
    respond(std::move(resp));
  };
  // The ingress filter already decided this request start is over its source's rate or below
  // the overload level: answer without decoding anything.
  if (request.tag && request.tag->refused()) {
    // Retry-After 1: the filter's buckets refill at least one request per second, and its
    // overload level follows the queues (docs/ERRORS.md "Retry-After").
    const bool limited = request.tag->verdict == net::IngressTag::Verdict::kRateLimited;
    return finish(httpErrorResponse(backends::withRetryAfter(
        limited ? absl::ResourceExhaustedError("request rate limit exceeded for this client")
                : absl::UnavailableError(
                      "server overloaded: only higher-priority requests are admitted"),
        1)));
  }
  if (!model.ready()) {
    return finish(errorResponse(503, "model '" + model.config().name + "' is not ready"));
  }
  std::optional<size_t> header_len;
  if (const std::string* h = request.header("inference-header-content-length")) {
    header_len = parseSize(*h);
    if (!header_len) {
      return finish(errorResponse(
          400, "Inference-Header-Content-Length must be a non-negative integer, got '" + *h + "'"));
    }
  }
  const backends::ModelConfig& cfg = model.config();
  // Streamed (startBody): decoded as the body arrived, straight into the model's slots, or
  // refused by the model's admission before any tensor byte was copied. Assembled: the decoder
  // writes the tensors from the body straight into the model's batch slots; the body's assembly
  // was a first copy of its binary tensor bytes.
  const backends::InputPlacer place = [&model](backends::InferRequest& r) {
    return model.placeInputs(r);
  };
  bool refused = false;
  absl::StatusOr<backends::InferRequest> req =
      request.body_reader
          ? static_cast<KServeBodyStream&>(*request.body_reader).finish(&refused)
          : decodeInferRequest(request.body, header_len, cfg, cfg.name, cfg.version, &place);
  if (!request.body_reader && req.ok() && header_len) {
    req->received_copy_bytes = request.body.size() - *header_len;
  }
  if (!req.ok()) {
    return finish(httpErrorResponse(req.status()));
  }
  if (absl::Status st = backends::validateRequest(cfg, *req); !st.ok()) {
    return finish(httpErrorResponse(st));
  }
  // Sequence affinity by header (docs/BACKENDS.md "Sequences"): the model's
  // sequence_id_header carries a string sequence id; the sequence_id parameter wins.
  if (const std::string_view header = backends::sequenceIdHeader(cfg);
      !header.empty() && !req->sequence.active()) {
    if (const std::string* v = request.header(header); v != nullptr && !v->empty()) {
      if (v->size() > 256) {
        return finish(errorResponse(400, std::string(header) +
                                             " must be at most 256 bytes (a sequence id)"));
      }
      req->sequence.id = *v;
      req->sequence.id_is_string = true;
    }
  }
  if (req->sequence.active()) {
    req->sequence.owner = sequenceOwner(request.tenant_lease.get(), request.peer);
  }
  {
    absl::StatusOr<int64_t> prio = resolvePriority(
        req->priority, request.header(kPriorityHeader),
        request.tag ? std::optional<int>(request.tag->priority_class) : std::nullopt,
        model.priorityLevels(), request.priority_trusted);
    if (!prio.ok()) {
      return finish(httpErrorResponse(prio.status()));
    }
    req->priority = *prio;
  }
  req->cancel = std::move(request.cancel);
  model.infer(std::move(*req), [finish = std::move(finish)](
                                   absl::StatusOr<backends::InferResponse> result) {
    if (!result.ok()) {
      return finish(httpErrorResponse(result.status()));
    }
    finish(encodeGuarded(
        [&] {
          EncodedInferResponse enc = encodeInferResponse(*result);
          HttpResponse resp;
          resp.status = 200;
          resp.body = std::move(enc.body);
          if (enc.json_header_length) {
            resp.content_type = "application/octet-stream";
            resp.headers.push_back(
                {"Inference-Header-Content-Length", std::to_string(*enc.json_header_length)});
          }
          return resp;
        },
        [](const absl::Status& st) { return httpErrorResponse(st); }));
  });
}

}  // namespace infergate::frontend
