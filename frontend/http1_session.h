#pragma once
// HTTP/1.1 server session: drives the strict parser with a transport's bytes, hands complete
// requests to an HttpHandler, and sends responses in request order (pipelining), whichever
// thread answers first. Handles keep-alive, Expect: 100-continue, back-pressure, header/body
// read timeouts (408), idle timeouts, and error responses that close the connection when the
// stream can no longer be trusted.
//
// Cancellation: every request carries a net::CancelToken (HttpRequest::cancel) that the
// session cancels when the connection is gone (reset, or closed by either side) before the
// request was answered, and, with `cancel_on_peer_close`, when the client half-closes (FIN).
//
// Threading: everything on the transport's loop thread; respond callbacks may be called from
// any thread and are moved to the loop with net::Loop::post.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "backends/tensor.h"
#include "frontend/client_priority.h"
#include "frontend/http1_parser.h"
#include "frontend/http_handler.h"
#include "frontend/peer_decisions.h"
#include "frontend/server_metrics.h"
#include "frontend/tenants.h"
#include "net/session.h"

namespace infergate::frontend {

struct Http1SessionOptions {
  Http1Limits limits;
  uint64_t idle_timeout_ns = 60'000'000'000ull;
  uint64_t header_timeout_ns = 10'000'000'000ull;
  uint64_t body_timeout_ns = 60'000'000'000ull;
  // The whole request, first byte to last body byte: 408 past it however steadily the body
  // trickles (body_timeout_ns measures only the gaps).
  uint64_t request_deadline_ns = 300'000'000'000ull;
  size_t max_in_flight = 64;           // pipelined requests awaiting responses
  size_t max_pending_bytes = 8 << 20;  // unsent response bytes before reading pauses
  bool access_log = false;
  // A FIN from the client while requests are unanswered cancels them (NGINX's default for
  // proxied requests, 499). Off by default: a client may half-close after its last request
  // and still read the answers (HTTP/1.1 allows it; tests/integration/test_http1_raw.py).
  bool cancel_on_peer_close = false;
  // Who may set a request's priority; null: every client (unit tests, embeddings).
  // `live_client_priority`, when set, wins: the policy in effect (a reload replaces it; the
  // session decides again for its peer when it changes).
  const ClientPriorityPolicy* client_priority = nullptr;
  const ClientPriorityPolicies* live_client_priority = nullptr;
  // Per-tenant limits (frontend/tenants.h); null: none. Every POST (an inference request) is
  // counted against its tenant when its headers are complete, before its body is read: a
  // refusal (429 with Retry-After) is answered in order and the body discarded unread. The
  // limiter in effect is read per request (a reload replaces it); its current() null: none.
  const TenantLimiters* tenants = nullptr;
};

class Http1Session : public net::Session,
                     public std::enable_shared_from_this<Http1Session>,
                     private Http1Parser::BodyHook {
 public:
  Http1Session(net::Transport& transport, HttpHandler& handler, const Http1SessionOptions& options,
               ServerMetrics* metrics);

  void onData(const char* data, size_t len) override;
  void onPeerClosed() override;
  void onTick(uint64_t now_ns) override;
  void onClosed() override;
  bool idle() const override { return slots_.empty() && !parser_.inRequest(); }

  // Requests whose handler threw (answered 503/500 instead).
  uint64_t handlerExceptions() const { return handler_exceptions_; }
  Http1Parser& parserForTesting() { return parser_; }

 private:
  struct Slot {
    uint64_t seq;
    bool ready = false;
    bool keep_alive = true;
    std::string bytes;
    // access log
    std::string method, target;
    uint64_t start_ns = 0;
    int status = 0;
    std::shared_ptr<net::CancelToken> cancel;   // until answered
    std::shared_ptr<TenantLease> tenant_lease;  // until answered (tenant in-flight cap)
  };
  // Http1Parser::BodyHook: the handler's body reader for a request whose headers are complete.
  std::unique_ptr<HttpBodyReader> startBody(HttpRequest& head, const HttpBodyInfo& body) override;
  void dispatch(HttpRequest&& request);
  void dispatchReady();
  void deliver(uint64_t seq, HttpResponse&& response);
  void failStream(int status, const std::string& reason, const std::string& message);
  void flush();
  void updateReading();
  void cancelUnanswered();
  // Tenant admission of a request whose headers are complete (options_.tenants, POST only):
  // OK with HttpRequest::tenant_lease set (once) and the tenant's default priority class put
  // on the request's tag, or the refusal.
  absl::Status admitTenant(HttpRequest& request);
  // Whether this peer may choose its requests' priority under the policy in effect (decided
  // again only when a reload published another policy).
  bool priorityTrusted();
  // The tenant of this peer's source address under `limiter` (decided again only when a
  // reload published another limiter).
  int sourceTenant(const TenantLimiter& limiter);

  net::Transport* transport_;
  HttpHandler& handler_;
  const Http1SessionOptions& options_;
  ServerMetrics* metrics_;
  Http1Parser parser_;
  std::deque<Slot> slots_;  // in request order; front is the next to send
  uint64_t next_seq_ = 0;
  uint64_t handler_exceptions_ = 0;
  PeerDecisions peer_;  // priority trust and source tenant, per published policy
  uint64_t last_activity_ns_ = 0;
  uint64_t request_start_ns_ = 0;
  bool stop_parsing_ = false;  // after an error or a request with Connection: close
  bool parse_error_ = false;   // the parser failed after the requests still in it
  bool dispatching_ = false;   // inside dispatchReady()
  bool peer_closed_ = false;
  bool closing_ = false;
  bool paused_ = false;
};

// A net::SessionFactory for HTTP/1.1 listeners.
net::SessionFactory makeHttp1SessionFactory(HttpHandler& handler,
                                            const Http1SessionOptions& options,
                                            ServerMetrics* metrics);

}  // namespace infergate::frontend
