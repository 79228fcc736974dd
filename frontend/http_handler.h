#pragma once
// What an HTTP session hands a complete request to: the API router (KServe v2 REST, admin).

#include <functional>

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
};

}  // namespace infergate::frontend
