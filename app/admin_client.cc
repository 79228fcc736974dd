#include "app/admin_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <string_view>

#include "common/unique_fd.h"
#include "fmt/format.h"

namespace infergate::app {

namespace {

using Clock = std::chrono::steady_clock;

int msLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// Waits until `fd` is ready for `events` or the deadline passes (false).
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const int left = msLeft(deadline);
    if (left == 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, left);
    if (n > 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return false;
    return true;  // an error: the next call on the socket reports it
  }
}

// A non-blocking connect bounded by the deadline: the connected descriptor, or -1.
int connectTo(const addrinfo* a, Clock::time_point deadline) {
  const int fd =
      socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
  int err = 0;
  socklen_t len = sizeof err;
  if (errno != EINPROGRESS || !waitFor(fd, POLLOUT, deadline) ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool headerIs(std::string_view line, std::string_view name, std::string_view* value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = line[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != name[i]) return false;
  }
  std::string_view v = line.substr(name.size() + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  *value = v;
  return true;
}

}  // namespace

absl::StatusOr<AdminResponse> adminGet(const std::string& admin, const std::string& target,
                                       const AdminGetOptions& options) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  const size_t colon = admin.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == admin.size()) {
    return absl::InvalidArgumentError(fmt::format("--admin '{}': expected host:port", admin));
  }
  std::string host = admin.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = admin.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(fmt::format("--admin '{}': {}", admin, gai_strerror(rc)));
  }
  common::UniqueFd fd;
  for (addrinfo* a = res; a != nullptr && fd.get() < 0; a = a->ai_next) {
    fd = common::UniqueFd(connectTo(a, deadline));
  }
  freeaddrinfo(res);
  if (fd.get() < 0) {
    return absl::UnavailableError(fmt::format(
        "cannot connect to the admin listener at {} (is `infergate run` up, with admin.enabled?)",
        admin));
  }
  const std::string req =
      fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", target, admin);
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = send(fd.get(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFor(fd.get(), POLLOUT, deadline)) {
        return absl::UnavailableError(fmt::format("{}: timed out sending the request", admin));
      }
    } else {
      return absl::UnavailableError(fmt::format("{}: send failed", admin));
    }
  }
  // The head is bounded separately from the body (64 KiB is far above what the gateway sends).
  constexpr size_t kMaxHead = 64u << 10;
  const size_t limit = options.max_body_bytes + kMaxHead;
  std::string resp;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      resp.append(buf, static_cast<size_t>(n));
      if (resp.size() > limit) {
        return absl::ResourceExhaustedError(fmt::format(
            "{}{}: the response is larger than {} bytes", admin, target, options.max_body_bytes));
      }
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      if (!waitFor(fd.get(), POLLIN, deadline)) {
        return absl::UnavailableError(fmt::format("{}{}: no complete response within {} ms", admin,
                                                  target, options.timeout_ms));
      }
      continue;
    }
    return absl::UnavailableError(fmt::format("{}{}: receive failed", admin, target));
  }
  const size_t head_end = resp.find("\r\n\r\n");
  if (resp.size() < 12 || resp.compare(0, 7, "HTTP/1.") != 0 || head_end == std::string::npos ||
      head_end > kMaxHead || resp[8] != ' ') {
    return absl::UnavailableError(fmt::format("{}: not an HTTP response", admin));
  }
  AdminResponse out;
  const std::string_view code(resp.data() + 9, 3);
  if (std::from_chars(code.data(), code.data() + 3, out.status).ptr != code.data() + 3 ||
      out.status < 100 || out.status > 599) {
    return absl::UnavailableError(fmt::format("{}: not an HTTP response", admin));
  }
  // Content-Length (the gateway sends it) or the bytes up to the close; no chunked coding.
  const std::string_view head(resp.data(), head_end);
  size_t line_start = head.find("\r\n");
  bool have_length = false;
  uint64_t length = 0;
  while (line_start != std::string_view::npos) {
    line_start += 2;
    const size_t line_end = head.find("\r\n", line_start);
    const std::string_view line =
        head.substr(line_start, line_end == std::string_view::npos ? std::string_view::npos
                                                                   : line_end - line_start);
    std::string_view v;
    if (headerIs(line, "content-length", &v)) {
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
      if (ec != std::errc() || p != v.data() + v.size() || have_length) {
        return absl::UnavailableError(fmt::format("{}: malformed Content-Length", admin));
      }
      have_length = true;
    } else if (headerIs(line, "transfer-encoding", &v)) {
      return absl::UnavailableError(
          fmt::format("{}: Transfer-Encoding '{}' is not supported here", admin, v));
    }
    line_start = line_end;
  }
  const size_t body_len = resp.size() - (head_end + 4);
  if (have_length) {
    if (length > options.max_body_bytes) {
      return absl::ResourceExhaustedError(fmt::format("{}{}: the response is larger than {} bytes",
                                                      admin, target, options.max_body_bytes));
    }
    if (length > body_len) {
      return absl::UnavailableError(fmt::format(
          "{}{}: the response ended after {} of {} body bytes", admin, target, body_len, length));
    }
    out.body = resp.substr(head_end + 4, static_cast<size_t>(length));
  } else {
    if (body_len > options.max_body_bytes) {
      return absl::ResourceExhaustedError(fmt::format("{}{}: the response is larger than {} bytes",
                                                      admin, target, options.max_body_bytes));
    }
    out.body = resp.substr(head_end + 4);
  }
  return out;
}

}  // namespace infergate::app
