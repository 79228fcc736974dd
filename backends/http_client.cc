#include "backends/http_client.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "common/unique_fd.h"
#include "common/ascii.h"
#include "common/clock.h"

namespace infergate::backends {
namespace {

using namespace common::ascii;  // isDigit, isAlpha, iequals, trim, printable

constexpr size_t kMaxHeadBytes = 64 * 1024;

using Fd = common::UniqueFd;

// Milliseconds left before `deadline_ns`, rounded up; 0 when it has passed.
int msLeft(uint64_t deadline_ns) {
  const uint64_t now = common::monotonicNs();
  if (now >= deadline_ns) return 0;
  return static_cast<int>(std::min<uint64_t>((deadline_ns - now + 999'999) / 1'000'000, 1 << 30));
}

// Waits for `events` on `fd` until the deadline: OK when ready, DEADLINE_EXCEEDED otherwise.
absl::Status waitFor(int fd, short events, uint64_t deadline_ns, const std::string& what) {
  for (;;) {
    const int left = msLeft(deadline_ns);
    if (left == 0) return absl::DeadlineExceededError(what);
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, left);
    if (r > 0) return absl::OkStatus();
    if (r == 0) continue;  // the loop re-checks the deadline
    if (errno == EINTR) continue;
    return absl::UnavailableError(fmt::format("poll: {}", std::strerror(errno)));
  }
}

// Incremental HTTP/1.1 response reader: status line, headers, then a body framed by
// Transfer-Encoding: chunked, Content-Length, or the end of the connection.
class ResponseReader {
 public:
  explicit ResponseReader(size_t max_body) : max_body_(max_body) {}

  // Consumes `data`; true when the response is complete.
  absl::StatusOr<bool> feed(std::string_view data) {
    buf_.append(data.data(), data.size());
    return advance();
  }

  // The peer closed the connection: complete, or an error saying what was cut short.
  absl::Status finish() {
    absl::StatusOr<bool> done = advance();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    switch (phase_) {
      case Phase::kUntilClose:
        phase_ = Phase::kDone;
        return absl::OkStatus();
      case Phase::kHead:
        return absl::DataLossError(buf_.empty() ? "connection closed without a response"
                                                : "connection closed inside the response headers");
      case Phase::kLength:
        return absl::DataLossError(fmt::format(
            "connection closed after {} of {} body bytes (Content-Length)", resp_.body.size(),
            content_length_));
      default:
        return absl::DataLossError("connection closed inside a chunked body");
    }
  }

  HttpResponse take() { return std::move(resp_); }

 private:
  enum class Phase { kHead, kChunkSize, kChunkData, kChunkEnd, kTrailers, kLength, kUntilClose,
                     kDone };

  // The next CRLF-terminated line from pos_ (without the CRLF); nullopt when incomplete.
  std::optional<std::string_view> line(size_t max_len) {
    const size_t eol = buf_.find("\r\n", pos_);
    if (eol == std::string::npos) {
      if (buf_.size() - pos_ > max_len) overlong_ = true;
      return std::nullopt;
    }
    std::string_view l(buf_.data() + pos_, eol - pos_);
    pos_ = eol + 2;
    return l;
  }

  absl::Status appendBody(std::string_view data) {
    if (resp_.body.size() + data.size() > max_body_) {
      return absl::ResourceExhaustedError(
          fmt::format("response body over {} bytes", max_body_));
    }
    resp_.body.append(data.data(), data.size());
    return absl::OkStatus();
  }

  absl::Status parseHead(std::string_view head) {
    // Status line: HTTP/1.x SSS reason
    size_t eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." ||
        !isDigit(status_line[7]) || status_line[8] != ' ' || !isDigit(status_line[9]) ||
        !isDigit(status_line[10]) || !isDigit(status_line[11]) ||
        (status_line.size() > 12 && status_line[12] != ' ')) {
      return absl::DataLossError(
          fmt::format("not an HTTP/1.x status line: '{}'", printable(status_line)));
    }
    resp_.status = (status_line[9] - '0') * 100 + (status_line[10] - '0') * 10 +
                   (status_line[11] - '0');
    bool chunked = false;
    std::optional<uint64_t> length;
    while (eol != std::string_view::npos) {
      head.remove_prefix(eol + 2);
      eol = head.find("\r\n");
      std::string_view h = head.substr(0, eol);
      if (h.empty()) continue;
      const size_t colon = h.find(':');
      if (colon == std::string_view::npos || colon == 0) {
        return absl::DataLossError(fmt::format("malformed header line '{}'", printable(h)));
      }
      std::string_view name = h.substr(0, colon);
      std::string_view value = trim(h.substr(colon + 1));
      if (iequals(name, "transfer-encoding")) {
        // The last coding decides the framing; only chunked is understood.
        const size_t comma = value.rfind(',');
        std::string_view last = trim(comma == std::string_view::npos ? value
                                                                     : value.substr(comma + 1));
        if (!iequals(last, "chunked")) {
          return absl::DataLossError(
              fmt::format("unsupported Transfer-Encoding '{}'", printable(value)));
        }
        chunked = true;
      } else if (iequals(name, "content-length")) {
        uint64_t n = 0;
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (value.empty() || ec != std::errc() || p != value.data() + value.size() ||
            (length.has_value() && *length != n)) {
          return absl::DataLossError(
              fmt::format("invalid Content-Length '{}'", printable(value)));
        }
        length = n;
      }
    }
    if (chunked) {
      phase_ = Phase::kChunkSize;  // Transfer-Encoding overrides Content-Length (RFC 9112 6.3)
    } else if (length.has_value()) {
      if (*length > max_body_) {
        return absl::ResourceExhaustedError(
            fmt::format("response body of {} bytes is over the {} byte limit", *length, max_body_));
      }
      content_length_ = *length;
      phase_ = content_length_ == 0 ? Phase::kDone : Phase::kLength;
    } else {
      phase_ = Phase::kUntilClose;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> advance() {
    for (;;) {
      switch (phase_) {
        case Phase::kHead: {
          const size_t end = buf_.find("\r\n\r\n");
          if (end == std::string::npos) {
            if (buf_.size() > kMaxHeadBytes) {
              return absl::ResourceExhaustedError(
                  fmt::format("response headers over {} bytes", kMaxHeadBytes));
            }
            return false;
          }
          if (end > kMaxHeadBytes) {
            return absl::ResourceExhaustedError(
                fmt::format("response headers over {} bytes", kMaxHeadBytes));
          }
          if (absl::Status s = parseHead(std::string_view(buf_).substr(0, end + 2)); !s.ok()) {
            return s;
          }
          pos_ = end + 4;
          break;
        }
        case Phase::kLength: {
          const size_t want = content_length_ - resp_.body.size();
          const size_t n = std::min(want, buf_.size() - pos_);
          resp_.body.append(buf_, pos_, n);
          pos_ += n;
          compact();
          if (resp_.body.size() == content_length_) {
            phase_ = Phase::kDone;
            break;
          }
          return false;
        }
        case Phase::kUntilClose: {
          if (absl::Status s = appendBody(std::string_view(buf_).substr(pos_)); !s.ok()) return s;
          pos_ = buf_.size();
          compact();
          return false;
        }
        case Phase::kChunkSize: {
          std::optional<std::string_view> l = line(1024);
          if (!l.has_value()) {
            if (overlong_) return absl::DataLossError("chunk size line over 1024 bytes");
            compact();
            return false;
          }
          std::string_view hex = trim(l->substr(0, l->find(';')));  // chunk extensions ignored
          uint64_t n = 0;
          auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), n, 16);
          if (hex.empty() || ec != std::errc() || p != hex.data() + hex.size()) {
            return absl::DataLossError(fmt::format("invalid chunk size '{}'", printable(*l)));
          }
          if (n > max_body_ || resp_.body.size() + n > max_body_) {
            return absl::ResourceExhaustedError(
                fmt::format("response body over {} bytes", max_body_));
          }
          chunk_left_ = n;
          phase_ = n == 0 ? Phase::kTrailers : Phase::kChunkData;
          break;
        }
        case Phase::kChunkData: {
          const size_t n = std::min<size_t>(chunk_left_, buf_.size() - pos_);
          resp_.body.append(buf_, pos_, n);
          pos_ += n;
          chunk_left_ -= n;
          if (chunk_left_ > 0) {
            compact();
            return false;
          }
          phase_ = Phase::kChunkEnd;
          break;
        }
        case Phase::kChunkEnd: {
          if (buf_.size() - pos_ < 2) {
            compact();
            return false;
          }
          if (buf_.compare(pos_, 2, "\r\n") != 0) {
            return absl::DataLossError("chunk data not followed by CRLF");
          }
          pos_ += 2;
          phase_ = Phase::kChunkSize;
          break;
        }
        case Phase::kTrailers: {
          std::optional<std::string_view> l = line(kMaxHeadBytes);
          if (!l.has_value()) {
            if (overlong_) return absl::DataLossError("trailer line too long");
            compact();
            return false;
          }
          if (l->empty()) phase_ = Phase::kDone;  // trailer fields, if any, are ignored
          break;
        }
        case Phase::kDone:
          return true;
      }
    }
  }

  // Drops consumed bytes once the head is parsed (keeps memory at one read's worth).
  void compact() {
    if (pos_ > 0 && phase_ != Phase::kHead) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
  }

  size_t max_body_;
  std::string buf_;
  size_t pos_ = 0;
  bool overlong_ = false;
  Phase phase_ = Phase::kHead;
  uint64_t content_length_ = 0;
  uint64_t chunk_left_ = 0;
  HttpResponse resp_;
};

}  // namespace

std::string HttpUrl::hostPort() const { return fmt::format("{}:{}", host, port); }

std::string HttpUrl::str() const { return fmt::format("http://{}:{}{}", host, port, path); }

absl::StatusOr<HttpUrl> parseHttpUrl(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("invalid URL '{}' (expected http://host:port/path)", printable(url)));
  }
  if (!iequals(url.substr(0, sep), "http")) {
    return absl::InvalidArgumentError(
        fmt::format("unsupported scheme '{}' in '{}' (only http:// is supported)",
                    printable(url.substr(0, sep)), printable(url)));
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          fmt::format("URL '{}' contains a space or control character", printable(url)));
    }
  }
  std::string_view rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "/" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("user info is not supported in '{}'", printable(url)));
  }
  if (authority.find_first_of("?#") != std::string_view::npos ||
      path.find('#') != std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid URL '{}' (expected http://host:port/path, no fragment)", printable(url)));
  }
  HttpUrl out;
  std::string_view host;
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1 ||
        authority.substr(1, close - 1).find_first_not_of("0123456789abcdefABCDEF:.") !=
            std::string_view::npos) {
      return absl::InvalidArgumentError(
          fmt::format("invalid IPv6 host in '{}'", printable(url)));
    }
    host = authority.substr(0, close + 1);
    if (close + 1 < authority.size() && authority[close + 1] != ':') {
      return absl::InvalidArgumentError(
          fmt::format("invalid URL '{}' (expected http://host:port/path)", printable(url)));
    }
    port = close + 1 < authority.size() ? authority.substr(close + 2) : std::string_view();
    if (close + 1 >= authority.size()) {
      return absl::InvalidArgumentError(
          fmt::format("URL '{}' has no port (expected http://host:port/path)", printable(url)));
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(
          fmt::format("URL '{}' has no port (expected http://host:port/path)", printable(url)));
    }
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    for (char c : host) {
      if (!(isAlpha(c) || isDigit(c) || c == '.' || c == '-' || c == '_')) {
        return absl::InvalidArgumentError(
            fmt::format("invalid host '{}' in '{}'", printable(host), printable(url)));
      }
    }
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(fmt::format("URL '{}' has no host", printable(url)));
  }
  uint32_t p = 0;
  auto [pe, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || pe != port.data() + port.size() || p < 1 ||
      p > 65535) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid port '{}' in '{}' (expected 1..65535)", printable(port), printable(url)));
  }
  out.host = std::string(host);
  out.port = static_cast<uint16_t>(p);
  out.path = std::string(path);
  return out;
}

absl::StatusOr<HttpResponse> httpGet(const HttpUrl& url, uint64_t timeout_ms,
                                     size_t max_body_bytes) {
  const uint64_t deadline = common::monotonicNs() + timeout_ms * 1'000'000;
  const std::string where = url.str();
  std::string host = url.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        fmt::format("cannot resolve '{}': {}", url.host, ::gai_strerror(rc)));
  }
  // Connect to the first address that accepts.
  Fd fd;
  std::string connect_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (s.get() < 0) {
      connect_error = fmt::format("socket: {}", std::strerror(errno));
      continue;
    }
    if (::connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        connect_error = fmt::format("connect: {}", std::strerror(errno));
        continue;
      }
      absl::Status w = waitFor(s.get(), POLLOUT, deadline, "connect timed out");
      if (!w.ok()) {
        ::freeaddrinfo(res);
        return absl::DeadlineExceededError(
            fmt::format("GET {}: connect timed out after {} ms", where, timeout_ms));
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        connect_error = fmt::format("connect: {}", std::strerror(err));
        continue;
      }
    }
    fd = std::move(s);
    break;
  }
  ::freeaddrinfo(res);
  if (fd.get() < 0) {
    return absl::UnavailableError(fmt::format("GET {}: {}", where, connect_error));
  }

  const std::string req = fmt::format(
      "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: infergate\r\nAccept: text/plain\r\n"
      "Connection: close\r\n\r\n",
      url.path, url.hostPort());
  size_t sent = 0;
  while (sent < req.size()) {
    const ssize_t n = ::send(fd.get(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFor(fd.get(), POLLOUT, deadline, "").ok()) {
        return absl::DeadlineExceededError(
            fmt::format("GET {}: no response within {} ms", where, timeout_ms));
      }
      continue;
    }
    return absl::UnavailableError(fmt::format("GET {}: send: {}", where, std::strerror(errno)));
  }

  ResponseReader reader(max_body_bytes);
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      absl::StatusOr<bool> done = reader.feed(std::string_view(buf, static_cast<size_t>(n)));
      if (!done.ok()) {
        return absl::Status(done.status().code(),
                            fmt::format("GET {}: {}", where, std::string(done.status().message())));
      }
      if (*done) return reader.take();
      continue;
    }
    if (n == 0) {
      absl::Status s = reader.finish();
      if (!s.ok()) {
        return absl::Status(s.code(), fmt::format("GET {}: {}", where, std::string(s.message())));
      }
      return reader.take();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFor(fd.get(), POLLIN, deadline, "").ok()) {
        return absl::DeadlineExceededError(
            fmt::format("GET {}: no complete response within {} ms", where, timeout_ms));
      }
      continue;
    }
    return absl::UnavailableError(fmt::format("GET {}: recv: {}", where, std::strerror(errno)));
  }
}

}  // namespace infergate::backends
