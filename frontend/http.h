#pragma once
// HTTP request/response values shared by the HTTP/1.1 codec (and later HTTP/2) and the API
// handlers. Header names are stored lower-cased.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cidr.h"
#include "net/cancel_token.h"
#include "net/ingress_tag.h"

namespace infergate::frontend {

class TenantLease;  // frontend/tenants.h

struct HttpHeader {
  std::string name;   // lower-case
  std::string value;  // leading/trailing whitespace removed
};

// Streaming body path (docs/PROTOCOLS.md "HTTP/1.1 body streaming"): a handler that wants a
// request's body as it arrives (HttpHandler::startBody) returns one of these when the request's
// headers are complete; the parser then hands it every de-chunked body byte, in order, as a
// pointer into the bytes the transport delivered (the AF_XDP frame or the socket read buffer),
// instead of appending them to HttpRequest::body. The request completes as usual and reaches
// HttpHandler::handle with the reader in HttpRequest::body_reader (the body stays empty).
// Called on the connection's loop thread from inside the parser: must not throw (an exception
// becomes a 503 no_memory parse error) and should not allocate per call.
class HttpBodyReader {
 public:
  virtual ~HttpBodyReader() = default;
  // `len` body bytes at `data`, valid for the call only. `copied`: the transport had copied
  // them into a buffer of its own first (net::Transport::deliveringCopy()).
  virtual void onBody(const char* data, size_t len, bool copied) = 0;
  // Body bytes the reader assembled into a buffer of its own (it could not stream them), for
  // ServerMetrics::recordBodyAssembled.
  virtual uint64_t assembledBytes() const { return 0; }
};

// What a handler knows of a body before it arrives (HttpHandler::startBody).
struct HttpBodyInfo {
  std::optional<uint64_t> content_length;  // nullopt: chunked
  uint64_t max_body = 0;                   // the parser's body limit (over it: 413)
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // origin-form request target, e.g. "/v2/models/m/infer?x=1"
  int version_minor = 1;
  std::vector<HttpHeader> headers;
  std::string body;       // complete body (de-chunked); empty when body_reader took it
  // The handler's reader that took the body as it arrived (HttpHandler::startBody); null: the
  // body was assembled into `body`.
  std::unique_ptr<HttpBodyReader> body_reader;
  // Set by HttpHandler::startBody for its own handle() (what it already looked up: e.g. the
  // KServe handler's model), so the request is not routed twice; null otherwise.
  void* handler_route = nullptr;
  bool keep_alive = true; // after this request, per HTTP/1.x rules and Connection headers
  uint64_t received_ns = 0;  // monotonic time the first byte of the request arrived
  // Set by the session when an ingress filter tagged the connection (net/ingress_tag.h).
  std::optional<net::IngressTag> tag;
  // The connection's source may choose the request's priority (ClientPriorityPolicy): the
  // x-infergate-priority header and the KServe priority parameter count only when true.
  bool priority_trusted = true;
  // The connection's source address (net::Transport::peerAddress), set by the session;
  // nullopt where the transport does not know it.
  std::optional<common::IpBytes> peer;
  // Set by the session: cancelled when the client is gone before the request was answered
  // (Http1Session); the handler hands it to the model (InferRequest::cancel).
  std::shared_ptr<net::CancelToken> cancel;
  // Set by the session when it counted the request against its tenant (frontend/tenants.h,
  // an inference request: POST): the tenant's in-flight place, held until the request is
  // answered. Null without tenants or for requests no tenant limit applies to.
  std::shared_ptr<TenantLease> tenant_lease;

  // First header with this (lower-case) name, or nullptr.
  const std::string* header(std::string_view lower_name) const;
  // The path part of the target (before '?').
  std::string_view path() const;
};

struct HttpResponse {
  int status = 200;
  // Static text (a string literal): not owned, so a response costs no allocation for it.
  std::string_view content_type = "application/json";
  std::vector<HttpHeader> headers;  // extra headers (not Content-Length/Connection)
  std::string body;
  bool close = false;  // close the connection after sending
};

// "OK", "Bad Request", ... for the status codes infergate sends.
std::string_view reasonPhrase(int status);

// Serialises status line, headers, Content-Length, Connection: close (when close), body.
void serializeResponse(const HttpResponse& resp, bool keep_alive, std::string& out);

// {"error":"<escaped message>"} -- KServe's error body.
std::string errorBody(std::string_view message);
// Appends `s` as a JSON string literal (with quotes), escaping as RFC 8259 requires. `latin1`:
// `s` is bytes, not UTF-8; every byte from 0x80 up is written as \u00XX (valid JSON).
void appendJsonString(std::string& out, std::string_view s, bool latin1 = false);

}  // namespace infergate::frontend
