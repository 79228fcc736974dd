#pragma once
// What an HTTP session hands a complete request to: the API router (KServe v2 REST, admin).

#include <functional>
#include <memory>

#include "frontend/http.h"

namespace infergate::frontend {

// Answers one request. Must be called exactly once, from any thread; the session moves the
// response to its loop thread and sends responses in request order (pipelining).
using HttpRespond = std::function<void(HttpResponse)>;

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Called on the connection's loop thread. May answer inline or later from another thread.
  virtual void handle(HttpRequest&& request, HttpRespond respond) = 0;
  // Called on the loop thread when the headers of a request with a body are complete, before
  // any body byte is parsed: return a reader to take the body as it arrives (HttpBodyReader),
  // or null (the default) to have it assembled into HttpRequest::body. `head` has the method,
  // target, headers, received_ns, and the tag and priority_trusted the request will carry; the
  // handler may keep nothing that points into it. An exception becomes a 503 no_memory parse error.
  virtual std::unique_ptr<HttpBodyReader> startBody(HttpRequest& /*head*/,
                                                    const HttpBodyInfo& /*body*/) {
    return nullptr;
  }
};

}  // namespace infergate::frontend
