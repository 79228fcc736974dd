#include "frontend/http1_session.h"

#include <exception>
#include <new>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "frontend/status_map.h"
#include "frontend/tfserving_rest.h"
#include "spdlog/spdlog.h"

namespace infergate::frontend {
namespace {

// The body of a request its tenant refused when its headers were complete: discarded unread
// (no byte is copied) while the refusal waits for its turn.
struct RefusedBody final : HttpBodyReader {
  explicit RefusedBody(absl::Status s) : status(std::move(s)) {}
  void onBody(const char*, size_t, bool) override {}
  absl::Status status;
};

// Per-thread recycling of response buffers (a reactor thread's connections share them): a
// response is serialised into a buffer that already has room, and the buffer goes back once
// the transport has copied it. Bounded so an idle thread keeps little.
constexpr size_t kMaxPooledBuffers = 16;
constexpr size_t kMaxPooledBufferBytes = 16 * 1024;

std::vector<std::string>& bufferPool() {
  thread_local std::vector<std::string> pool;
  return pool;
}

std::string takeBuffer() {
  std::vector<std::string>& pool = bufferPool();
  if (pool.empty()) return {};
  std::string b = std::move(pool.back());
  pool.pop_back();
  return b;
}

void recycleBuffer(std::string&& b) {
  std::vector<std::string>& pool = bufferPool();
  if (pool.size() >= kMaxPooledBuffers || b.capacity() > kMaxPooledBufferBytes) return;
  b.clear();
  pool.push_back(std::move(b));
}

}  // namespace

Http1Session::Http1Session(net::Transport& transport, HttpHandler& handler,
                           const Http1SessionOptions& options, ServerMetrics* metrics)
    : transport_(&transport),
      handler_(handler),
      options_(options),
      metrics_(metrics),
      parser_(options.limits),
      last_activity_ns_(transport.loop().nowNs()) {
  parser_.setBodyHook(this);
}

bool Http1Session::priorityTrusted() {
  return peer_.priorityTrusted(options_.live_client_priority, options_.client_priority, transport_);
}

int Http1Session::sourceTenant(const TenantLimiter& limiter) {
  return peer_.sourceTenant(limiter, transport_);
}

absl::Status Http1Session::admitTenant(HttpRequest& request) {
  if (options_.tenants == nullptr || request.method != "POST") return absl::OkStatus();
  if (!request.tenant_lease) {
    const TenantLimiter* tenants = options_.tenants->current();  // a reload may replace it
    if (tenants == nullptr) return absl::OkStatus();
    const std::string& key_header = tenants->apiKeyHeader();
    const std::string* key = nullptr;
    size_t keys = 0;
    for (const HttpHeader& h : request.headers) {
      if (h.name != key_header) continue;
      if (keys++ == 0) key = &h.value;
    }
    absl::StatusOr<int> tenant = tenants->classify(sourceTenant(*tenants), key, keys);
    if (!tenant.ok()) return tenant.status();
    TenantAdmission a = tenants->admit(*tenant);
    if (!a.status.ok()) return a.status;
    request.tenant_lease = std::move(a.lease);
  }
  // The tenant's default class stands in for the XDP tag's (a trusted client's own priority
  // still wins: resolvePriority). The limiter that admitted it says which.
  const TenantLease& lease = *request.tenant_lease;
  if (std::optional<int> cls = lease.limiter()->priorityClass(lease.tenant())) {
    if (!request.tag) request.tag.emplace();
    request.tag->priority_class = *cls;
  }
  return absl::OkStatus();
}

std::unique_ptr<HttpBodyReader> Http1Session::startBody(HttpRequest& head,
                                                        const HttpBodyInfo& body) {
  // What dispatch() would set: the handler decides on them before the body arrives.
  head.tag = transport_->ingressTag();
  head.priority_trusted = priorityTrusted();
  head.peer = transport_->peerAddress();
  // Counted against its tenant before a body byte is read; refused: the body is discarded.
  if (absl::Status st = admitTenant(head); !st.ok()) {
    return std::make_unique<RefusedBody>(std::move(st));
  }
  return handler_.startBody(head, body);
}

void Http1Session::onData(const char* data, size_t len) {
  if (transport_ == nullptr || stop_parsing_) return;  // bytes after a final request: discarded
  const uint64_t now = transport_->loop().nowNs();
  last_activity_ns_ = now;
  const bool was_in_request = parser_.inRequest();
  const Http1Parser::Result r = parser_.feed(data, len, now, transport_->deliveringCopy());
  if (!was_in_request && parser_.inRequest()) request_start_ns_ = now;
  if (r == Http1Parser::Result::kError) parse_error_ = true;
  dispatchReady();
  if (transport_ == nullptr || stop_parsing_) return;
  if (parser_.inRequest() && request_start_ns_ == 0) request_start_ns_ = now;
  if (parser_.expectContinue()) {
    parser_.clearExpectContinue();
    transport_->send("HTTP/1.1 100 Continue\r\n\r\n");
  }
  updateReading();
}

// Hands parsed requests to the handler while fewer than max_in_flight await their responses;
// the rest wait in the parser (bounded by the one read they came in: reading is paused) until
// responses go out. A parse error is answered after every request before it.
void Http1Session::dispatchReady() {
  if (dispatching_) return;  // an inline answer's flush(): the loop below goes on
  dispatching_ = true;
  while (parser_.hasRequest() && !stop_parsing_ && slots_.size() < options_.max_in_flight) {
    HttpRequest req = parser_.popRequest();
    if (!req.keep_alive) stop_parsing_ = true;
    dispatch(std::move(req));
    // The handler is done with it (it took what it keeps): its buffers serve the next request.
    Http1Parser::recycle(std::move(req));
    if (transport_ == nullptr) return;
  }
  dispatching_ = false;
  if (parse_error_ && !parser_.hasRequest() && !stop_parsing_) {
    parse_error_ = false;
    const Http1Error& e = parser_.error();
    failStream(e.status, e.reason, e.message);
  }
}

void Http1Session::dispatch(HttpRequest&& request) {
  Slot slot;
  slot.seq = next_seq_++;
  slot.keep_alive = request.keep_alive;
  slot.start_ns = request.received_ns;
  if (options_.access_log) {
    slot.method = request.method;
    slot.target = request.target;
  }
  slots_.push_back(std::move(slot));
  request_start_ns_ = 0;
  if (metrics_ != nullptr) {
    const uint64_t assembled =
        request.body.size() + (request.body_reader ? request.body_reader->assembledBytes() : 0);
    if (assembled != 0) metrics_->recordBodyAssembled(assembled);
  }
  // A streamed request got its tag when its headers were complete (startBody).
  if (!request.body_reader) request.tag = transport_->ingressTag();
  request.priority_trusted = priorityTrusted();
  request.peer = transport_->peerAddress();
  const uint64_t seq = slots_.back().seq;
  if (options_.tenants != nullptr) {
    // Refused when its headers were complete (RefusedBody), or now (a request without a body).
    absl::Status refusal;
    if (auto* refused = dynamic_cast<RefusedBody*>(request.body_reader.get())) {
      refusal = refused->status;
    } else {
      refusal = admitTenant(request);
    }
    if (!refusal.ok()) {
      HttpResponse r = httpErrorResponse(refusal);
      if (metrics_ != nullptr) {
        const uint64_t now = common::monotonicNs();  // received_ns's clock (kserve_rest.cc)
        metrics_->recordRequest(-1,
                                TfServingRestHandler::handles(request.path())
                                    ? net::Protocol::kHttpTfServing
                                    : net::Protocol::kHttpKserve,
                                r.status, request.received_ns ? now - request.received_ns : 0);
      }
      deliver(seq, std::move(r));
      return;
    }
    slots_.back().tenant_lease = std::move(request.tenant_lease);
  }
  HttpRespond respond =
      net::answerOnLoop(transport_->loop(), weak_from_this(), seq, &Http1Session::deliver);
  // A handler that throws (out of memory decoding a hostile body, a bug) fails its own
  // request with 503/500; the connection and the process go on. deliver() ignores the
  // answer if the handler had already given one.
  try {
    auto token = std::make_shared<net::CancelToken>();
    slots_.back().cancel = token;
    request.cancel = std::move(token);
    handler_.handle(std::move(request), std::move(respond));
  } catch (const std::bad_alloc&) {
    ++handler_exceptions_;
    HttpResponse r;
    r.status = 503;
    r.body = errorBody("out of memory for this request");
    deliver(seq, std::move(r));
  } catch (const std::exception& e) {
    ++handler_exceptions_;
    HttpResponse r;
    r.status = 500;
    r.body = errorBody(std::string("internal error: ") + e.what());
    deliver(seq, std::move(r));
  }
}

void Http1Session::cancelUnanswered() {
  // Collected first: a canceller may answer inline, and deliver() may touch slots_.
  std::vector<std::shared_ptr<net::CancelToken>> tokens;
  for (Slot& s : slots_) {
    if (!s.ready && s.cancel) tokens.push_back(std::move(s.cancel));
  }
  for (auto& t : tokens) t->cancel();
}

void Http1Session::deliver(uint64_t seq, HttpResponse&& response) {
  if (transport_ == nullptr || slots_.empty()) return;
  const uint64_t first = slots_.front().seq;
  if (seq < first || seq - first >= slots_.size()) return;  // not ours (already failed)
  Slot& slot = slots_[seq - first];
  if (slot.ready) return;
  slot.ready = true;
  slot.cancel.reset();
  slot.tenant_lease.reset();  // answered: the tenant's in-flight place goes
  slot.status = response.status;
  if (response.close) slot.keep_alive = false;
  slot.bytes = takeBuffer();
  serializeResponse(response, slot.keep_alive, slot.bytes);
  flush();
}

void Http1Session::failStream(int status, const std::string& reason, const std::string& message) {
  stop_parsing_ = true;
  if (metrics_ != nullptr) metrics_->recordParseError(reason);
  if (metrics_ != nullptr) metrics_->recordRequest(-1, net::Protocol::kHttpKserve, status, 0);
  Slot slot;
  slot.seq = next_seq_++;
  slot.ready = true;
  slot.keep_alive = false;
  slot.status = status;
  slot.method = "-";
  slot.target = reason;
  HttpResponse resp;
  resp.status = status;
  resp.body = errorBody(message);
  resp.close = true;
  serializeResponse(resp, false, slot.bytes);
  slots_.push_back(std::move(slot));
  flush();
}

void Http1Session::flush() {
  while (transport_ != nullptr && !slots_.empty() && slots_.front().ready) {
    Slot& s = slots_.front();
    transport_->send(s.bytes);
    if (options_.access_log) {
      const uint64_t now = transport_->loop().nowNs();
      spdlog::info("access {} {} {} {}B {}us", s.method, s.target, s.status, s.bytes.size(),
                   s.start_ns ? (now - s.start_ns) / 1000 : 0);
    }
    const bool keep = s.keep_alive;
    recycleBuffer(std::move(s.bytes));  // the transport has copied it
    slots_.pop_front();
    last_activity_ns_ = transport_->loop().nowNs();
    if (!keep) {
      closing_ = true;
      slots_.clear();
      transport_->closeAfterFlush();
      return;
    }
  }
  if (transport_ == nullptr) return;
  if (parser_.hasRequest() || parse_error_) {
    dispatchReady();  // room again for requests parsed earlier
    if (transport_ == nullptr || closing_) return;
  }
  if (peer_closed_ && slots_.empty()) {
    closing_ = true;
    transport_->closeAfterFlush();
    return;
  }
  updateReading();
}

void Http1Session::updateReading() {
  if (transport_ == nullptr || closing_) return;
  const bool want_pause = slots_.size() >= options_.max_in_flight || parser_.hasRequest() ||
                          transport_->pendingBytes() > options_.max_pending_bytes;
  if (want_pause != paused_) {
    paused_ = want_pause;
    transport_->pauseReading(paused_);
  }
}

void Http1Session::onPeerClosed() {
  peer_closed_ = true;
  stop_parsing_ = true;
  if (options_.cancel_on_peer_close) cancelUnanswered();
  if (transport_ != nullptr && slots_.empty() && !closing_) {
    closing_ = true;
    transport_->closeAfterFlush();
  }
}

void Http1Session::onTick(uint64_t now_ns) {
  if (transport_ == nullptr || closing_) return;
  // Reading paused for queued output resumes once the transport has drained it: nothing else
  // reaches a paused session when no response is pending.
  updateReading();
  if (parser_.inRequest() && !stop_parsing_ && request_start_ns_ != 0) {
    const uint64_t limit =
        parser_.headersComplete() ? options_.body_timeout_ns : options_.header_timeout_ns;
    // The body timeout counts from the last byte received, so slow but steady uploads live.
    const uint64_t since = parser_.headersComplete() ? last_activity_ns_ : request_start_ns_;
    if (now_ns - since > limit) {
      failStream(408, "timeout",
                 parser_.headersComplete() ? "timed out waiting for the request body"
                                           : "timed out waiting for the request headers");
      return;
    }
    if (now_ns - request_start_ns_ > options_.request_deadline_ns) {
      failStream(408, "request_deadline",
                 "the request was not complete within " +
                     std::to_string(options_.request_deadline_ns / 1'000'000) + " ms");
      return;
    }
  }
  if (slots_.empty() && !parser_.inRequest() &&
      now_ns - last_activity_ns_ > options_.idle_timeout_ns) {
    closing_ = true;
    transport_->closeAfterFlush();
  }
}

void Http1Session::onClosed() {
  transport_ = nullptr;  // before cancelling: late answers find no transport and are dropped
  cancelUnanswered();
  slots_.clear();
}

net::SessionFactory makeHttp1SessionFactory(HttpHandler& handler,
                                            const Http1SessionOptions& options,
                                            ServerMetrics* metrics) {
  return [&handler, &options, metrics](net::Transport& t) -> std::shared_ptr<net::Session> {
    return std::make_shared<Http1Session>(t, handler, options, metrics);
  };
}

}  // namespace infergate::frontend
