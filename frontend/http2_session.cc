#include "frontend/http2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <utility>
#include <vector>

#include "frontend/kserve_rest.h"
#include "frontend/status_map.h"
#include "spdlog/spdlog.h"

namespace infergate::frontend {

struct Http2Session::Stream {
  int32_t id = 0;
  std::string method_name;  // :method
  std::string path;
  std::string content_type;
  std::string grpc_timeout;
  size_t header_bytes = 0;
  bool header_too_large = false;
  bool headers_done = false;
  GrpcMethod method;
  GrpcCall call;
  GrpcMessageReader reader;
  uint64_t messages = 0;
  int outstanding = 0;  // call()s awaiting their reply
  bool remote_closed = false;
  bool ended = false;  // final status decided (trailers queued or sent)
  bool headers_sent = false;
  bool deferred = false;  // the data provider returned NGHTTP2_ERR_DEFERRED
  bool trailers_ready = false;
  // A unary call's reply came before the client half-closed: its OK waits for END_STREAM,
  // so a second request message still ends the call INTERNAL (one message per unary call).
  bool answered_early = false;
  absl::StatusCode status = absl::StatusCode::kOk;
  std::string status_message;
  uint32_t retry_after_s = 0;  // the final status's Retry-After hint (0: none)
  std::string api_key;         // the tenants' api_key_header metadata (the first), until admission
  size_t api_keys = 0;         // how many times it came
  std::shared_ptr<TenantLease> tenant_lease;  // admitted: until the call ends
  int http_status = 200;
  std::string out;  // framed response messages not yet handed to nghttp2
  size_t out_off = 0;
  uint64_t last_rx_ns = 0;  // HEADERS or DATA last arrived (stream_timeout_ns)
  size_t held = 0;          // this stream's share of held_bytes_ (reader buffer + out)
  size_t withheld = 0;      // DATA bytes received and not yet acknowledged

  // Streaming decode (GrpcServices::openSink): messages go to the sink piece by piece.
  std::unique_ptr<GrpcMessageSink> sink;

  size_t holding() const {
    return reader.bufferedBytes() + (sink ? sink->bufferedBytes() : 0) + (out.size() - out_off);
  }

  explicit Stream(size_t max_message) : reader(max_message) {}
};

namespace {

nghttp2_nv makeNv(std::string_view name, std::string_view value) {
  nghttp2_nv nv;
  nv.name = reinterpret_cast<uint8_t*>(const_cast<char*>(name.data()));
  nv.namelen = name.size();
  nv.value = reinterpret_cast<uint8_t*>(const_cast<char*>(value.data()));
  nv.valuelen = value.size();
  nv.flags = NGHTTP2_NV_FLAG_NONE;  // nghttp2 copies name and value
  return nv;
}

}  // namespace

// The nghttp2 C callbacks; user_data is the Http2Session.
struct Http2Session::Callbacks {
  static Http2Session& self(void* user_data) { return *static_cast<Http2Session*>(user_data); }

  static Stream* find(Http2Session& h, int32_t id) {
    auto it = h.streams_.find(id);
    return it == h.streams_.end() ? nullptr : it->second.get();
  }

  // Runs a callback body; an exception becomes NGHTTP2_ERR_CALLBACK_FAILURE (the connection
  // ends with GOAWAY) instead of unwinding through nghttp2's C frames.
  template <typename F>
  static int guarded(void* user_data, F&& body) {
    try {
      return body();
    } catch (...) {
      ++self(user_data).stats_.callback_exceptions;
      self(user_data).fatal_code_ = NGHTTP2_INTERNAL_ERROR;
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
  }

  // Every frame header, before nghttp2 acts on it.
  static int onBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
    Http2Session& h = self(user_data);
    if (hd->type == NGHTTP2_RST_STREAM) ++h.resets_received_;
    if (hd->type != NGHTTP2_HEADERS || hd->stream_id <= 0) return 0;
    const int32_t id = hd->stream_id;
    if (id > h.max_peer_stream_) {
      h.max_peer_stream_ = id;
      h.opened_[h.opened_next_++ % h.opened_.size()] = id;
      return 0;
    }
    if (h.streams_.count(id) != 0) return 0;  // trailers on an open stream
    for (int32_t o : h.opened_) {
      if (o == id) return 0;  // opened before, closed since: nghttp2 ignores or refuses it
    }
    // An identifier lower than one the peer already used, never opened: PROTOCOL_ERROR.
    ++h.stats_.stream_id_errors;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }

  static int onBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    return guarded(user_data, [&] { return beginHeaders(session, frame, user_data); });
  }
  static int beginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    Http2Session& h = self(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto s = std::make_unique<Stream>(h.options_.max_message_bytes);
    s->id = frame->hd.stream_id;
    s->call.stream_id = s->id;
    s->call.start_ns = h.transport_ != nullptr ? h.transport_->loop().nowNs() : 0;
    if (h.transport_ != nullptr) s->call.peer = h.transport_->peerAddress();
    s->last_rx_ns = s->call.start_ns;
    s->call.priority_trusted = h.priorityTrusted();
    // The ingress tag of the latest request start the transport saw (xdp-filter / afxdp modes;
    // none in socket mode). The XDP program tags the h2 preface, not each HEADERS frame, so for
    // gRPC this is the connection's class.
    if (h.transport_ != nullptr) {
      if (std::optional<net::IngressTag> tag = h.transport_->ingressTag()) {
        s->call.priority_class = tag->priority_class;
      }
    }
    ++h.stats_.streams;
    h.streams_[s->id] = std::move(s);
    return 0;
  }

  static int onHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user_data) {
    return guarded(user_data, [&] {
      return header(session, frame, name, namelen, value, valuelen, flags, user_data);
    });
  }
  static int header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                    size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                    void* user_data) {
    Http2Session& h = self(user_data);
    Stream* s = find(h, frame->hd.stream_id);
    if (s == nullptr || s->headers_done || s->header_too_large) return 0;  // trailers: ignored
    s->header_bytes += namelen + valuelen + 32;  // RFC 9113 6.5.2 accounting
    if (s->header_bytes > h.options_.max_header_list_bytes) {
      s->header_too_large = true;
      return 0;
    }
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":path") {
      s->path = v;
    } else if (n == ":method") {
      s->method_name = v;
    } else if (n == "content-type") {
      s->content_type = v;
    } else if (n == "grpc-timeout") {
      s->grpc_timeout = v;
    } else if (n == kPriorityHeader) {
      s->call.priority_metadata = std::string(v);  // validated by the service (resolvePriority)
    } else if (const TenantLimiter* t =
                   h.options_.tenants != nullptr ? h.options_.tenants->current() : nullptr;
               t != nullptr && n == t->apiKeyHeader()) {
      if (s->api_keys++ == 0) s->api_key = v;  // within max_header_list_bytes; dropped at admission
    } else if (n.size() > 2 && n.size() <= 64 && n.substr(0, 2) == "x-" && v.size() <= 4096 &&
               s->call.custom_metadata.size() < GrpcCall::kMaxCustomMetadata) {
      s->call.custom_metadata.emplace_back(n, v);  // HTTP/2 names are lower case (RFC 9113 8.2)
    }
    return 0;
  }

  static int onFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    return guarded(user_data, [&] { return frameRecv(session, frame, user_data); });
  }
  static int frameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    Http2Session& h = self(user_data);
    Stream* s = find(h, frame->hd.stream_id);
    if (s == nullptr) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      h.onHeadersDone(*s);
    }
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
      h.onStreamEnd(*s);
    }
    return 0;
  }

  static int onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data) {
    return guarded(user_data, [&] {
      Http2Session& h = self(user_data);
      Stream* s = find(h, stream_id);
      if (s != nullptr) h.onStreamData(*s, data, len);
      h.received(s, stream_id, len);  // after: the bytes it now holds count
      return 0;
    });
  }

  static int onFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    Http2Session& h = self(user_data);
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      ++h.stats_.protocol_errors;
      // nghttp2 ends a rapid-reset flood with INTERNAL_ERROR, its other floods with
      // ENHANCE_YOUR_CALM.
      if ((frame->goaway.error_code == NGHTTP2_ENHANCE_YOUR_CALM && !h.timed_out_) ||
          (frame->goaway.error_code == NGHTTP2_INTERNAL_ERROR &&
           h.resets_received_ > h.options_.stream_reset_burst)) {
        ++h.stats_.flood_trips;
      }
      if (h.metrics_ != nullptr) {
        h.metrics_->recordParseError(std::string("http2_") +
                                     nghttp2_http2_strerror(frame->goaway.error_code));
      }
    }
    // We answered before the peer finished sending: ask it to stop (RFC 9113 8.1).
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
      Stream* s = find(h, frame->hd.stream_id);
      if (s != nullptr && !s->remote_closed) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
      }
    }
    return 0;
  }

  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                           void* user_data) {
    Http2Session& h = self(user_data);
    auto it = h.streams_.find(stream_id);
    if (it == h.streams_.end()) return 0;
    Stream& s = *it->second;
    // Work still outstanding (e.g. queued in a batcher) is cancelled.
    std::shared_ptr<net::CancelToken> cancel;
    if (s.outstanding > 0) cancel = std::move(s.call.cancel);
    if (!s.ended) {
      // Reset by the peer (or the connection went away) before the call ended: cancelled.
      s.ended = true;
      ++h.stats_.cancelled;
      h.record(s, absl::StatusCode::kCancelled);
    }
    h.forgetStream(s);
    h.streams_.erase(it);
    // After the erase: an answer given inline by the canceller finds no stream.
    if (cancel) cancel->cancel();
    return 0;
  }

  static ssize_t readData(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void* user_data) {
    Stream& s = *static_cast<Stream*>(source->ptr);
    const size_t avail = s.out.size() - s.out_off;
    const size_t n = std::min(avail, length);
    if (n > 0) {
      std::memcpy(buf, s.out.data() + s.out_off, n);
      s.out_off += n;
      if (s.out_off == s.out.size()) {
        std::string().swap(s.out);  // a large reply's memory goes as soon as it is framed
        s.out_off = 0;
      }
      self(user_data).rehold(s);
    }
    if (s.out.empty()) {
      if (s.trailers_ready) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        const std::string code = std::to_string(static_cast<int>(s.status));
        std::vector<nghttp2_nv> nva;
        nva.push_back(makeNv("grpc-status", code));
        std::string msg;
        if (!s.status_message.empty()) {
          msg = percentEncodeGrpcMessage(s.status_message);
          nva.push_back(makeNv("grpc-message", msg));
        }
        const std::string retry = std::to_string(s.retry_after_s);
        const std::string pushback = std::to_string(uint64_t{s.retry_after_s} * 1000);
        if (s.retry_after_s != 0) {
          nva.push_back(makeNv(kGrpcRetryAfterKey, retry));
          nva.push_back(makeNv(kGrpcRetryPushbackKey, pushback));
        }
        nghttp2_submit_trailer(session, stream_id, nva.data(), nva.size());
      } else if (n == 0) {
        s.deferred = true;
        return NGHTTP2_ERR_DEFERRED;
      }
    }
    return static_cast<ssize_t>(n);
  }
};

Http2Session::Http2Session(net::Transport& transport, GrpcServices& services,
                           const Http2SessionOptions& options, ServerMetrics* metrics)
    : transport_(&transport),
      services_(services),
      options_(options),
      metrics_(metrics),
      last_activity_ns_(transport.loop().nowNs()) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, &Callbacks::onBeginFrame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &Callbacks::onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &Callbacks::onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Callbacks::onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &Callbacks::onDataChunk);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &Callbacks::onFrameSend);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Callbacks::onStreamClose);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // Header blocks larger than this are refused by HPACK already (we enforce the list size).
  nghttp2_option_set_max_send_header_block_length(opt, 64 * 1024);
  nghttp2_option_set_max_outbound_ack(opt, options_.max_outbound_ack);
  nghttp2_option_set_max_settings(opt, options_.max_settings_entries);
  nghttp2_option_set_stream_reset_rate_limit(opt, options_.stream_reset_burst,
                                             options_.stream_reset_rate);
  nghttp2_option_set_max_continuations(opt, options_.max_continuations);
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, options_.max_hpack_table_bytes);
  // We acknowledge received DATA ourselves, against the connection's memory budget.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_session_server_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);

  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE,
       std::clamp<uint32_t>(options_.max_frame_size, 16384, 16777215)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, options_.max_header_list_bytes},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
       std::min<uint32_t>(options_.initial_window_bytes, (1u << 31) - 1)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings,
                          sizeof(settings) / sizeof(settings[0]));
  if (options_.connection_window_bytes > 65535) {
    nghttp2_session_set_local_window_size(
        session_, NGHTTP2_FLAG_NONE, 0,
        static_cast<int32_t>(std::min<uint32_t>(options_.connection_window_bytes, (1u << 31) - 1)));
  }
  flush();  // our SETTINGS go out first (the server connection preface)
}

Http2Session::~Http2Session() {
  if (session_ != nullptr) nghttp2_session_del(session_);
}

void Http2Session::onData(const char* data, size_t len) {
  if (transport_ == nullptr || closing_) return;
  last_activity_ns_ = transport_->loop().nowNs();
  ++in_nghttp2_;
  const ssize_t rv =
      nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(data), len);
  --in_nghttp2_;
  if (transport_ == nullptr) return;
  if (rv < 0) fatal(static_cast<int>(rv));
  flush();
}

void Http2Session::addGathered(uint64_t bytes) {
  if (bytes == 0) return;
  stats_.gathered_bytes += bytes;
  if (metrics_ != nullptr) metrics_->recordGrpcGathered(bytes);
}

void Http2Session::fatal(int err) {
  // nghttp2 queues GOAWAY itself for the connection errors it detects; errors returned from
  // mem_recv (bad client preface, flooding, callback failure) get one here.
  spdlog::debug("http2: closing connection: {}", nghttp2_strerror(err));
  const uint32_t code = err == NGHTTP2_ERR_FLOODED || err == NGHTTP2_ERR_TOO_MANY_SETTINGS
                            ? uint32_t{NGHTTP2_ENHANCE_YOUR_CALM}
                        : err == NGHTTP2_ERR_CALLBACK_FAILURE && fatal_code_ != 0
                            ? fatal_code_
                            : uint32_t{NGHTTP2_PROTOCOL_ERROR};
  // Counted when the GOAWAY goes out (onFrameSend).
  nghttp2_session_terminate_session(session_, code);
}

void Http2Session::flush() {
  if (transport_ == nullptr || in_nghttp2_ > 0 || closing_) return;
  if (withheld_bytes_ > 0) grantWindow();
  for (;;) {
    const uint8_t* p = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &p);
    if (n < 0) {
      spdlog::debug("http2: mem_send: {}", nghttp2_strerror(static_cast<int>(n)));
      closing_ = true;
      transport_->closeAfterFlush();
      return;
    }
    if (n == 0) break;
    transport_->send(std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(n)));
  }
  if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
    closing_ = true;  // GOAWAY exchanged and nothing left in flight
    transport_->closeAfterFlush();
    return;
  }
  updateReading();
}

void Http2Session::updateReading() {
  if (transport_ == nullptr || closing_) return;
  const bool want_pause = transport_->pendingBytes() > options_.max_pending_bytes;
  if (want_pause != paused_) {
    paused_ = want_pause;
    transport_->pauseReading(paused_);
  }
}

size_t Http2Session::memoryBytes() const {
  return held_bytes_ + (transport_ != nullptr ? transport_->pendingBytes() : 0);
}

void Http2Session::rehold(Stream& s) {
  const size_t now = s.holding();
  held_bytes_ = held_bytes_ - s.held + now;
  s.held = now;
  if (held_bytes_ > stats_.peak_memory_bytes) stats_.peak_memory_bytes = held_bytes_;
}

void Http2Session::forgetStream(Stream& s) {
  held_bytes_ -= s.held;
  s.held = 0;
  withheld_bytes_ -= s.withheld;  // the stream window goes with the stream
  s.withheld = 0;
  if (favoured_ == s.id) favoured_ = 0;
}

void Http2Session::received(Stream* s, int32_t stream_id, size_t len) {
  if (len == 0) return;
  // The connection window is always returned: withholding it could starve the one stream
  // that would free memory by completing its message. Stream windows are what we withhold,
  // so an over-budget connection holds at most max_concurrent_streams * initial_window_bytes
  // more (plus one message being finished).
  nghttp2_session_consume_connection(session_, len);
  if (s == nullptr) return;  // not a request stream of ours: nghttp2 discards it
  const size_t mem = memoryBytes();
  if (mem > stats_.peak_memory_bytes) stats_.peak_memory_bytes = mem;
  bool grant = mem <= options_.max_connection_memory_bytes || favoured_ == s->id;
  if (!grant && favoured_ == 0 && !s->ended && !s->reader.atBoundary()) {
    favoured_ = s->id;  // this one may finish its message even over budget
    grant = true;
  }
  if (!grant) {
    if (withheld_bytes_ == 0) ++stats_.window_withheld;
    withheld_bytes_ += len;
    s->withheld += len;
    return;
  }
  returnWithheld(*s);  // e.g. it just became the favoured stream
  if (s->id == favoured_ && s->reader.atBoundary()) favoured_ = 0;
  nghttp2_session_consume_stream(session_, stream_id, len);
}

void Http2Session::returnWithheld(Stream& s) {
  if (s.withheld == 0) return;
  nghttp2_session_consume_stream(session_, s.id, s.withheld);
  withheld_bytes_ -= s.withheld;
  s.withheld = 0;
}

void Http2Session::grantWindow() {
  if (memoryBytes() > options_.max_connection_memory_bytes) {
    if (favoured_ != 0) return;
    // Still over budget and nobody may finish a message: let the one furthest along do so.
    Stream* best = nullptr;
    for (auto& [id, sp] : streams_) {
      Stream& s = *sp;
      if (s.withheld == 0 || s.ended || s.reader.atBoundary()) continue;
      if (best == nullptr || s.held > best->held) best = &s;
    }
    if (best == nullptr) return;
    favoured_ = best->id;
    returnWithheld(*best);
    return;
  }
  for (auto& [id, sp] : streams_) returnWithheld(*sp);
}

void Http2Session::onHeadersDone(Stream& s) {
  s.headers_done = true;
  if (s.header_too_large) {
    if (metrics_ != nullptr) metrics_->recordParseError("http2_header_list_too_large");
    s.http_status = 431;
    finishStream(
        s, absl::StatusCode::kResourceExhausted,
        "header list larger than " + std::to_string(options_.max_header_list_bytes) + " bytes");
    return;
  }
  s.method = services_.resolve(s.path);
  if (s.method_name != "POST") {
    s.http_status = 405;
    finishStream(s, absl::StatusCode::kUnimplemented, "gRPC requires POST, got " + s.method_name);
    return;
  }
  const std::string_view ct = s.content_type;
  if (ct.substr(0, 16) != "application/grpc" ||
      (ct.size() > 16 && ct[16] != '+' && ct[16] != ';')) {
    s.http_status = 415;
    finishStream(s, absl::StatusCode::kUnknown,
                 "content-type must be application/grpc, got '" + s.content_type + "'");
    return;
  }
  if (s.method.id < 0) {
    finishStream(s, absl::StatusCode::kUnimplemented,
                 "Method not found: " + (s.path.empty() ? s.path : s.path.substr(1)));
    return;
  }
  if (!s.grpc_timeout.empty()) {
    const std::optional<uint64_t> t = parseGrpcTimeout(s.grpc_timeout);
    if (!t) {
      finishStream(s, absl::StatusCode::kInvalidArgument,
                   "malformed grpc-timeout '" + s.grpc_timeout + "'");
      return;
    }
    s.call.timeout_ns = *t == 0 ? 1 : *t;
    s.call.deadline_ns = *t > UINT64_MAX - s.call.start_ns ? UINT64_MAX : s.call.start_ns + *t;
    if (*t == 0) {
      ++stats_.deadline_exceeded;
      finishStream(s, absl::StatusCode::kDeadlineExceeded, "Deadline Exceeded");
      return;
    }
  }
  const TenantLimiter* limiter =
      options_.tenants != nullptr ? options_.tenants->current() : nullptr;
  if (limiter != nullptr && s.method.limited) {
    // Counted against its tenant before any message byte is read (the limiter in effect: a
    // reload may replace it; the lease keeps the one that admitted the call).
    const TenantLimiter& tenants = *limiter;
    absl::StatusOr<int> tenant = tenants.classify(sourceTenant(tenants), &s.api_key, s.api_keys);
    std::string().swap(s.api_key);
    if (!tenant.ok()) {
      finishStream(s, tenant.status().code(), std::string(tenant.status().message()));
      return;
    }
    TenantAdmission a = tenants.admit(*tenant);
    if (!a.status.ok()) {
      finishStream(s, a.status.code(), std::string(a.status.message()),
                   retryAfterFor(a.status).value_or(0));
      return;
    }
    s.tenant_lease = std::move(a.lease);
    s.call.tenant = s.tenant_lease.get();
    // The tenant's default class stands in for the XDP tag's (a trusted client's own priority
    // still wins: resolvePriority).
    if (std::optional<int> cls = tenants.priorityClass(a.tenant)) s.call.priority_class = *cls;
  }
}

// Hands a stream's message bytes to its sink as they arrive (GrpcMessageReader::feedPieces).
struct Http2Session::SinkFeed final : GrpcMessageReader::PieceHandler {
  Http2Session& h;
  Stream& s;
  bool copied;
  SinkFeed(Http2Session& session, Stream& stream, bool c) : h(session), s(stream), copied(c) {}

  absl::Status onBegin(uint32_t size) override {
    if (s.ended) return absl::OkStatus();
    if (!s.sink) s.sink = h.services_.openSink(s.method, s.call);  // the first split message
    if (!s.sink) {
      h.finishStream(s, absl::StatusCode::kInternal, "no message sink for a streaming method");
      return absl::OkStatus();
    }
    s.sink->begin(size);
    return absl::OkStatus();
  }
  absl::Status onWhole(std::string_view message) override {
    if (!s.ended) h.dispatch(s, &message);  // inside one DATA chunk: decoded in place
    return absl::OkStatus();
  }
  absl::Status onPiece(const char* data, size_t len) override {
    if (s.ended) return absl::OkStatus();  // answered: the rest is discarded unread
    absl::Status st;
    // Inside an nghttp2 callback: no exception may cross it (as in dispatch()).
    try {
      st = s.sink->piece(data, len, copied);
    } catch (const std::bad_alloc&) {
      ++h.stats_.service_exceptions;
      st = absl::ResourceExhaustedError("out of memory for this request");
    } catch (const std::exception& e) {
      ++h.stats_.service_exceptions;
      st = absl::InternalError(std::string("internal error: ") + e.what());
    }
    if (!st.ok()) {
      h.finishStream(s, st.code(), std::string(st.message()), retryAfterFor(st).value_or(0));
    }
    return absl::OkStatus();
  }
  absl::Status onEnd() override {
    if (!s.ended) h.dispatch(s, nullptr);
    return absl::OkStatus();
  }
};

void Http2Session::onStreamData(Stream& s, const uint8_t* data, size_t len) {
  if (transport_ != nullptr) s.last_rx_ns = transport_->loop().nowNs();
  if (s.ended || !s.headers_done) return;  // already answered: the rest is discarded
  if (s.call.deadline_ns != 0 && transport_ != nullptr &&
      transport_->loop().nowNs() >= s.call.deadline_ns) {
    // The deadline passed before the message completed: refused before copying its bytes.
    ++stats_.deadline_exceeded;
    finishStream(s, absl::StatusCode::kDeadlineExceeded, "Deadline Exceeded");
    if (s.sink) s.sink.reset();  // drops the message in progress (and its placement)
    rehold(s);
    return;
  }
  absl::Status st;
  if (s.method.streaming_decode) {
    // One copy: the sink writes tensor bytes straight from this DATA chunk.
    const uint64_t gathered = s.sink ? s.sink->gatheredBytes() : 0;
    SinkFeed feed(*this, s, transport_ != nullptr && transport_->deliveringCopy());
    st = s.reader.feedPieces(reinterpret_cast<const char*>(data), len, feed);
    if (s.sink) addGathered(s.sink->gatheredBytes() - gathered);
  } else {
    const uint64_t gathered = s.reader.gatheredBytes();
    st = s.reader.feed(reinterpret_cast<const char*>(data), len, [&](std::string_view message) {
      if (!s.ended) dispatch(s, &message);
      return absl::OkStatus();
    });
    addGathered(s.reader.gatheredBytes() - gathered);
  }
  rehold(s);
  if (!st.ok() && !s.ended) {
    if (metrics_ != nullptr) {
      metrics_->recordParseError(st.code() == absl::StatusCode::kResourceExhausted
                                     ? "grpc_message_too_large"
                                     : "grpc_bad_message");
    }
    finishStream(s, st.code(), std::string(st.message()));
  }
}

bool Http2Session::priorityTrusted() {
  return peer_.priorityTrusted(options_.live_client_priority, options_.client_priority, transport_);
}

int Http2Session::sourceTenant(const TenantLimiter& limiter) {
  return peer_.sourceTenant(limiter, transport_);
}

void Http2Session::dispatch(Stream& s, const std::string_view* message) {
  ++s.messages;
  if (!s.method.client_streaming && s.messages > 1) {
    finishStream(s, absl::StatusCode::kInternal, "unary call with more than one request message");
    return;
  }
  if (s.tenant_lease && s.messages > 1) {
    // A stream's later requests spend their tenant's rate too (the first was admitted with
    // the call); over it, the stream ends with the refusal.
    if (absl::Status st = s.tenant_lease->limiter()->charge(s.tenant_lease->tenant()); !st.ok()) {
      finishStream(s, st.code(), std::string(st.message()), retryAfterFor(st).value_or(0));
      return;
    }
  }
  ++s.outstanding;
  GrpcRespond respond =
      net::answerOnLoop(transport_->loop(), weak_from_this(), s.id, &Http2Session::deliver);
  // We are inside an nghttp2 callback: no exception may cross it. A service that throws
  // (out of memory decoding a hostile message, a bug) fails its own stream, nothing else.
  try {
    if (!s.call.cancel) s.call.cancel = std::make_shared<net::CancelToken>();
    if (message != nullptr) {
      services_.call(s.method, s.call, *message, std::move(respond));
    } else {
      s.sink->end(s.call, std::move(respond));
    }
  } catch (const std::bad_alloc&) {
    ++stats_.service_exceptions;
    if (!s.ended)
      finishStream(s, absl::StatusCode::kResourceExhausted, "out of memory for this request");
  } catch (const std::exception& e) {
    ++stats_.service_exceptions;
    if (!s.ended)
      finishStream(s, absl::StatusCode::kInternal, std::string("internal error: ") + e.what());
  }
}

void Http2Session::onStreamEnd(Stream& s) {
  s.remote_closed = true;
  if (s.ended || !s.headers_done) return;
  if (!s.reader.atBoundary()) {
    finishStream(s, absl::StatusCode::kInternal, "stream ended inside a gRPC message");
    return;
  }
  if (!s.method.client_streaming) {
    if (s.messages == 0) {
      finishStream(s, absl::StatusCode::kInternal, "unary call without a request message");
    } else if (s.answered_early && s.outstanding == 0) {
      finishStream(s, absl::StatusCode::kOk, "");
    }
    return;
  }
  if (s.outstanding == 0) finishStream(s, absl::StatusCode::kOk, "");
}

void Http2Session::deliver(int32_t stream_id, GrpcReply&& reply) {
  if (transport_ == nullptr) return;
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;  // cancelled: the reply is dropped
  Stream& s = *it->second;
  if (s.outstanding > 0) --s.outstanding;
  if (s.outstanding == 0) s.call.cancel.reset();  // nothing left to cancel
  if (s.ended) return;                            // e.g. the deadline passed first
  if (s.call.deadline_ns != 0 && transport_->loop().nowNs() >= s.call.deadline_ns) {
    // The client's deadline passed while the call was with the model: whatever the model
    // answered (OK, late; or the queue's own UNAVAILABLE timeout, which clients retry), the
    // call ends DEADLINE_EXCEEDED, as it would have at the next tick.
    ++stats_.deadline_exceeded;
    finishStream(s, absl::StatusCode::kDeadlineExceeded, "Deadline Exceeded");
    flush();
    return;
  }
  if (reply.code != absl::StatusCode::kOk) {
    finishStream(s, reply.code, reply.message, reply.retry_after_s);
  } else {
    if (!reply.framed.empty()) {
      if (s.out.empty()) {
        s.out = std::move(reply.framed);
        s.out_off = 0;
      } else {
        s.out.append(reply.framed);
      }
      rehold(s);
      submitHeadersIfNeeded(s);
      if (s.deferred) {
        s.deferred = false;
        nghttp2_session_resume_data(session_, s.id);
      }
    }
    if (s.remote_closed && s.outstanding == 0) {
      finishStream(s, absl::StatusCode::kOk, "");
    } else if (!s.method.client_streaming) {
      s.answered_early = true;  // onStreamEnd ends it OK; a second message, INTERNAL
    }
  }
  flush();
}

void Http2Session::submitHeadersIfNeeded(Stream& s) {
  if (s.headers_sent) return;
  s.headers_sent = true;
  const nghttp2_nv nva[] = {makeNv(":status", "200"), makeNv("content-type", "application/grpc"),
                            makeNv("grpc-accept-encoding", "identity")};
  nghttp2_data_provider prd;
  prd.source.ptr = &s;
  prd.read_callback = &Callbacks::readData;
  nghttp2_submit_response(session_, s.id, nva, 3, &prd);
}

void Http2Session::finishStream(Stream& s, absl::StatusCode code, const std::string& message,
                                uint32_t retry_after_s) {
  if (s.ended) return;
  s.ended = true;
  s.status = code;
  s.status_message = message;
  s.retry_after_s = code == absl::StatusCode::kOk ? 0 : retry_after_s;
  s.tenant_lease.reset();  // the call is over: the tenant's in-flight place goes
  s.call.tenant = nullptr;
  record(s, code);
  if (!s.headers_sent) {
    // Trailers-Only: one HEADERS frame with END_STREAM.
    s.headers_sent = true;
    const std::string status = std::to_string(s.http_status);
    const std::string grpc_status = std::to_string(static_cast<int>(code));
    const std::string msg = percentEncodeGrpcMessage(message);
    std::vector<nghttp2_nv> nva = {makeNv(":status", status),
                                   makeNv("content-type", "application/grpc"),
                                   makeNv("grpc-status", grpc_status)};
    if (!msg.empty()) nva.push_back(makeNv("grpc-message", msg));
    const std::string retry = std::to_string(s.retry_after_s);
    const std::string pushback = std::to_string(uint64_t{s.retry_after_s} * 1000);
    if (s.retry_after_s != 0) {
      nva.push_back(makeNv(kGrpcRetryAfterKey, retry));
      nva.push_back(makeNv(kGrpcRetryPushbackKey, pushback));
    }
    nghttp2_submit_response(session_, s.id, nva.data(), nva.size(), nullptr);
    return;
  }
  s.trailers_ready = true;
  if (s.deferred) {
    s.deferred = false;
    nghttp2_session_resume_data(session_, s.id);
  }
}

void Http2Session::record(Stream& s, absl::StatusCode code) {
  if (metrics_ == nullptr) return;
  const uint64_t now = transport_ != nullptr ? transport_->loop().nowNs() : s.call.start_ns;
  metrics_->recordRequest(s.call.model_index, s.method.protocol, httpStatusForCode(code),
                          now > s.call.start_ns ? now - s.call.start_ns : 0);
}

void Http2Session::onPeerClosed() {
  if (transport_ == nullptr || closing_) return;
  // No more requests can come; in-flight calls still get their answers.
  shutdown();
  if (idle()) {
    closing_ = true;
    transport_->closeAfterFlush();
  }
}

void Http2Session::onTick(uint64_t now_ns) {
  if (transport_ == nullptr || closing_) return;
  // Reading paused for queued output resumes once the transport has drained it: nothing else
  // reaches a paused session when no response is pending.
  updateReading();
  bool any_open = false;
  for (auto& [id, sp] : streams_) {
    Stream& s = *sp;
    if (s.ended) continue;
    any_open = true;
    if (!s.headers_done) {
      // CONTINUATION frames outstanding: nghttp2 takes no other frame until they come, so
      // only the connection can end. Once.
      if (now_ns - s.call.start_ns > options_.header_timeout_ns && !timed_out_) {
        timed_out_ = true;
        shutting_down_ = true;
        ++stats_.header_timeouts;
        if (metrics_ != nullptr) metrics_->recordParseError("http2_header_timeout");
        nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
      }
      continue;
    }
    if (s.call.deadline_ns != 0 && now_ns >= s.call.deadline_ns) {
      ++stats_.deadline_exceeded;
      finishStream(s, absl::StatusCode::kDeadlineExceeded, "Deadline Exceeded");
      continue;
    }
    // A unary call's request message, however steadily it trickles: bounded as a whole.
    if (!s.method.client_streaming && s.messages == 0 && !s.remote_closed &&
        now_ns - s.call.start_ns > options_.request_deadline_ns) {
      ++stats_.stream_timeouts;
      if (metrics_ != nullptr) metrics_->recordParseError("http2_request_deadline");
      finishStream(s, absl::StatusCode::kDeadlineExceeded,
                   "request not complete within " +
                       std::to_string(options_.request_deadline_ns / 1'000'000) + " ms");
      continue;
    }
    // Waiting for the client (nothing of ours outstanding) and it sends nothing.
    if (!s.remote_closed && s.outstanding == 0 &&
        now_ns - s.last_rx_ns > options_.stream_timeout_ns) {
      ++stats_.stream_timeouts;
      if (metrics_ != nullptr) metrics_->recordParseError("http2_stream_timeout");
      finishStream(s, absl::StatusCode::kDeadlineExceeded,
                   "request not received: nothing for " +
                       std::to_string(options_.stream_timeout_ns / 1'000'000) + " ms");
    }
  }
  if (!any_open && streams_.empty() && now_ns - last_activity_ns_ > options_.idle_timeout_ns &&
      !shutting_down_) {
    shutting_down_ = true;
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
  }
  flush();
}

void Http2Session::shutdown() {
  if (shutting_down_ || transport_ == nullptr) return;
  shutting_down_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

bool Http2Session::idle() const {
  for (const auto& [id, s] : streams_) {
    if (!s->ended) return false;
  }
  return !nghttp2_session_want_write(session_);
}

void Http2Session::onClosed() {
  transport_ = nullptr;
  // Calls still open are cancelled; their late replies find no stream.
  std::vector<std::shared_ptr<net::CancelToken>> tokens;
  for (auto& [id, s] : streams_) {
    if (s->call.cancel && s->outstanding > 0) tokens.push_back(std::move(s->call.cancel));
    if (!s->ended) {
      s->ended = true;
      ++stats_.cancelled;
      record(*s, absl::StatusCode::kCancelled);
    }
  }
  streams_.clear();
  held_bytes_ = 0;
  withheld_bytes_ = 0;
  favoured_ = 0;
  for (auto& t : tokens) t->cancel();
}

net::SessionFactory makeHttp2SessionFactory(GrpcServices& services,
                                            const Http2SessionOptions& options,
                                            ServerMetrics* metrics) {
  return [&services, &options, metrics](net::Transport& t) -> std::shared_ptr<net::Session> {
    return std::make_shared<Http2Session>(t, services, options, metrics);
  };
}

}  // namespace infergate::frontend
