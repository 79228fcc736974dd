#pragma once
// Strict HTTP/1.1 request parser (server side) over llhttp.
//
// Feed it the bytes of one connection in any split; it yields complete requests in order
// (pipelining) and stops at the first error. Strict against request smuggling: it refuses
// Content-Length together with Transfer-Encoding, duplicate or malformed Content-Length,
// Transfer-Encoding other than a final "chunked", obs-fold, bare CR or LF, invalid
// token/header characters, unsupported HTTP versions, and oversize headers/bodies/targets.
// After an error the stream cannot be trusted: the caller answers with error().status and
// closes the connection.
//
// Threading: one parser per connection, used by the connection's reactor thread only.

#include <cstddef>
#include <cstdint>
#include <vector>
#include <memory>
#include <string>
#include <string_view>

#include "frontend/http.h"

namespace infergate::frontend {

struct Http1Limits {
  size_t max_header_bytes = 16 * 1024;          // request line + all headers
  size_t max_target_bytes = 8 * 1024;           // request target; over it: 414
  size_t max_body_bytes = 64 * 1024 * 1024;     // decoded body; over it: 413
  size_t max_headers = 100;                     // header fields; over it: 431
};

struct Http1Error {
  int status = 0;           // 400, 411, 413, 414, 431, 501, 505
  std::string reason;       // short stable label for metrics, e.g. "cl_and_te", "bad_version"
  std::string message;      // human sentence for the {"error": ...} body
};

class Http1Parser {
 public:
  explicit Http1Parser(const Http1Limits& limits);
  ~Http1Parser();
  Http1Parser(const Http1Parser&) = delete;
  Http1Parser& operator=(const Http1Parser&) = delete;

  enum class Result {
    kOk,     // all bytes consumed; zero or more complete requests are ready
    kError,  // the stream is broken: see error(); ready() still holds requests completed before
  };
  // Consumes `len` bytes. `now_ns` stamps HttpRequest::received_ns of requests that start here.
  // `copied`: the transport had copied these bytes into a buffer of its own
  // (net::Transport::deliveringCopy()); passed on to a body reader with each body piece.
  Result feed(const char* data, size_t len, uint64_t now_ns = 0, bool copied = false);

  // Body streaming (HttpBodyReader): asked when a request with a body has complete headers,
  // before its first body byte. A non-null reader takes every de-chunked body byte as it is
  // parsed (pointers into the fed bytes) and travels with the request (HttpRequest::body_reader);
  // null: the body is assembled into HttpRequest::body. Limits, chunked framing, trailers and
  // pipelining are the same either way.
  class BodyHook {
   public:
    virtual ~BodyHook() = default;
    virtual std::unique_ptr<HttpBodyReader> startBody(HttpRequest& head,
                                                      const HttpBodyInfo& body) = 0;
  };
  void setBodyHook(BodyHook* hook);

  bool hasRequest() const { return ready_head_ < ready_.size(); }
  HttpRequest popRequest();  // precondition: hasRequest()

  // Hands an answered request back for reuse by the next request parsed on this thread (its
  // strings and vectors keep their capacity; see the .cc for the bounds). Optional: a request
  // simply destroyed is fine. Call on the thread that parsed it.
  static void recycle(HttpRequest&& request);

  const Http1Error& error() const { return error_; }
  bool failed() const { return failed_; }

  // True while a request has started (bytes received) but is not complete; used for the
  // header-read timeout (408) and to decide if a peer close lost a partial request.
  bool inRequest() const { return in_request_; }
  // True while the current request's headers are complete and its body is still arriving
  // (picks the body timeout over the header timeout). False between requests.
  bool headersComplete() const { return headers_complete_; }
  // True when the headers of the current request are complete and it carried
  // "Expect: 100-continue" and no body byte has arrived yet: the caller should send
  // "HTTP/1.1 100 Continue". Reset by clearExpectContinue().
  bool expectContinue() const { return expect_continue_; }
  void clearExpectContinue() { expect_continue_ = false; }

  // Tests: the next body callback throws std::bad_alloc, as an allocation failure would.
  void failNextBodyAllocationForTesting();

  // Implementation detail (llhttp callbacks); not part of the interface.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  static HttpRequest takeRecycledRequest();

  std::vector<HttpRequest> ready_;  // complete requests from ready_head_ on
  size_t ready_head_ = 0;
  Http1Error error_;
  bool failed_ = false;
  bool in_request_ = false;
  bool headers_complete_ = false;
  bool expect_continue_ = false;
  friend struct Impl;
};

}  // namespace infergate::frontend
