#include "frontend/admin_handler.h"

namespace infergate::frontend {

bool AdminHandler::loopback(const std::optional<common::IpBytes>& peer) {
  if (!peer) return false;  // unknown: not trusted
  const common::IpBytes& a = *peer;
  static constexpr common::IpBytes kV6Loopback = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (a == kV6Loopback) return true;
  for (int i = 0; i < 10; ++i) {
    if (a[i] != 0) return false;
  }
  return a[10] == 0xff && a[11] == 0xff && a[12] == 127;
}

namespace {

// Compares in time that does not depend on where the strings first differ (the length may
// show).
bool sameSecret(std::string_view presented, std::string_view secret) {
  if (secret.empty() || presented.size() != secret.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < secret.size(); ++i) diff |= presented[i] ^ secret[i];
  return diff == 0;
}

}  // namespace

void AdminHandler::handle(HttpRequest&& request, HttpRespond respond) {
  HttpResponse r;
  const std::string_view path = request.path();
  const bool control = request.method == "POST" || path.substr(0, 7) == "/admin/";
  if (control && !loopback(request.peer)) {
    // Reload, GPU inspection and whatever comes next: loopback, or the token.
    const std::string* auth = request.header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool presented = auth != nullptr && auth->size() > kBearer.size() &&
                           std::string_view(*auth).substr(0, kBearer.size()) == kBearer;
    if (token_.empty()) {
      r.status = 403;
      r.body = errorBody(std::string(path) +
                         " answers loopback peers only: set admin.token to admit others");
      return respond(std::move(r));
    }
    if (!presented ||
        !sameSecret(std::string_view(*auth).substr(kBearer.size()), token_)) {
      r.status = 401;
      r.headers.push_back({"WWW-Authenticate", "Bearer realm=\"infergate-admin\""});
      r.body = errorBody(presented ? "wrong admin token" : "an admin token is required");
      return respond(std::move(r));
    }
  }
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
