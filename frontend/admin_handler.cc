#include "frontend/admin_handler.h"

namespace infergate::frontend {

void AdminHandler::handle(HttpRequest&& request, HttpRespond respond) {
  HttpResponse r;
  const std::string_view path = request.path();
  if (request.method == "POST") {
    if (auto it = post_routes_.find(path); it != post_routes_.end()) {
      r = it->second(request);
    } else {
      r.status = 405;
      r.headers.push_back({"Allow", "GET"});
      r.body = errorBody("method POST not allowed on " + std::string(path));
    }
  } else if (request.method != "GET") {
    r.status = 405;
    r.headers.push_back({"Allow", post_routes_.empty() ? "GET" : "GET, POST"});
    r.body = errorBody("method " + request.method + " not allowed on the admin listener");
  } else if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.renderPrometheus();
  } else if (path == "/v2/health/live") {
    r.status = 200;
  } else if (path == "/v2/health/ready") {
    r.status = models_.allReady() ? 200 : 400;
  } else if (auto it = routes_.find(path); it != routes_.end()) {
    r = it->second(request);
  } else {
    r.status = 404;
    r.body = errorBody("not found: " + std::string(path));
  }
  respond(std::move(r));
}

}  // namespace infergate::frontend
