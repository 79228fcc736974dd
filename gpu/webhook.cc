#include "gpu/webhook.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"
#include "common/clock.h"
#include "fmt/format.h"

namespace infergate::gpu {

namespace {

constexpr uint64_t kNsPerMs = 1'000'000;

using Fd = common::UniqueFd;

// Milliseconds left until `deadline_ns` for poll(): at least 0, at most INT_MAX.
int msLeft(uint64_t deadline_ns) {
  const uint64_t now = common::monotonicNs();
  if (now >= deadline_ns) return 0;
  const uint64_t ms = (deadline_ns - now + kNsPerMs - 1) / kNsPerMs;
  return ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms);
}

// Waits for `events` on fd until the deadline; OK, DEADLINE_EXCEEDED or the poll error.
absl::Status waitFor(int fd, short events, uint64_t deadline_ns, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, msLeft(deadline_ns));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError(fmt::format("webhook: {} timed out", what));
    if (errno != EINTR)
      return absl::UnavailableError(fmt::format("webhook: poll: {}", std::strerror(errno)));
  }
}

absl::StatusOr<int> connectTo(const WebhookUrl& url, uint64_t timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return absl::UnavailableError(
        fmt::format("webhook: resolving {}: {}", url.host, ::gai_strerror(rc)));
  absl::Status last = absl::UnavailableError(fmt::format("webhook: no address for {}", url.host));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
    if (fd < 0) {
      last = absl::UnavailableError(fmt::format("webhook: socket: {}", std::strerror(errno)));
      continue;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    if (errno != EINPROGRESS) {
      last = absl::UnavailableError(
          fmt::format("webhook: connecting to {}: {}", url.hostHeader(), std::strerror(errno)));
      ::close(fd);
      continue;
    }
    absl::Status w = waitFor(fd, POLLOUT, common::monotonicNs() + timeout_ms * kNsPerMs,
                             "connect");
    int err = 0;
    socklen_t len = sizeof err;
    if (w.ok() && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    last = w.ok() ? absl::UnavailableError(fmt::format("webhook: connecting to {}: {}",
                                                       url.hostHeader(), std::strerror(err)))
                  : w;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

bool hasCtlOrSpace(std::string_view s) {
  for (unsigned char c : s)
    if (c <= 0x20 || c == 0x7f) return true;
  return false;
}

}  // namespace

std::string WebhookUrl::hostHeader() const {
  const bool v6 = host.find(':') != std::string::npos;
  return v6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

absl::StatusOr<WebhookUrl> parseWebhookUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.size() >= 8 && (url.substr(0, 8) == "https://" || url.substr(0, 8) == "HTTPS://"))
    return absl::InvalidArgumentError(fmt::format(
        "webhook URL '{}': https is not supported (no TLS); use an http:// URL, for example a "
        "local relay",
        url));
  if (url.substr(0, kScheme.size()) != kScheme)
    return absl::InvalidArgumentError(
        fmt::format("webhook URL '{}': expected http://host[:port][/path]", url));
  if (hasCtlOrSpace(url))
    return absl::InvalidArgumentError(
        fmt::format("webhook URL '{}': spaces or control characters are not allowed", url));
  std::string_view rest = url.substr(kScheme.size());
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  const size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  WebhookUrl out;
  if (slash != std::string_view::npos) {
    out.path = std::string(rest.substr(slash));
    if (out.path[0] == '?') out.path.insert(out.path.begin(), '/');
  }
  if (authority.find('@') != std::string_view::npos)
    return absl::InvalidArgumentError(
        fmt::format("webhook URL '{}': user info (user@host) is not supported", url));
  std::string_view port_text;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return absl::InvalidArgumentError(fmt::format("webhook URL '{}': unclosed '[' in the host", url));
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':')
        return absl::InvalidArgumentError(fmt::format("webhook URL '{}': junk after ']'", url));
      port_text = after.substr(1);
      if (port_text.empty())
        return absl::InvalidArgumentError(fmt::format("webhook URL '{}': empty port", url));
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty())
        return absl::InvalidArgumentError(fmt::format("webhook URL '{}': empty port", url));
    }
  }
  if (out.host.empty())
    return absl::InvalidArgumentError(fmt::format("webhook URL '{}': no host", url));
  if (!port_text.empty()) {
    uint32_t port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535)
        return absl::InvalidArgumentError(fmt::format("webhook URL '{}': bad port '{}'", url, port_text));
      port = port * 10 + static_cast<uint32_t>(c - '0');
    }
    if (port == 0 || port > 65535)
      return absl::InvalidArgumentError(fmt::format("webhook URL '{}': bad port '{}'", url, port_text));
    out.port = static_cast<uint16_t>(port);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<WebhookSender>> WebhookSender::create(std::string_view url,
                                                                     uint64_t timeout_ms) {
  auto parsed = parseWebhookUrl(url);
  if (!parsed.ok()) return parsed.status();
  if (timeout_ms == 0) timeout_ms = 1;
  return std::unique_ptr<WebhookSender>(new WebhookSender(*std::move(parsed), timeout_ms));
}

WebhookSender::WebhookSender(WebhookUrl url, uint64_t timeout_ms)
    : url_(std::move(url)), timeout_ms_(timeout_ms) {
  thread_ = std::thread([this] { run(); });
}

WebhookSender::~WebhookSender() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);
    queue_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool WebhookSender::send(std::string json_body) {
  {
    std::lock_guard lock(mu_);
    if (!stop_ && queue_.size() < kQueueMax) {
      queue_.push_back(std::move(json_body));
      cv_.notify_one();
      return true;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool WebhookSender::waitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && !busy_; });
}

void WebhookSender::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    std::string body = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    const absl::Status s = post(url_, body, timeout_ms_);
    (s.ok() ? sent_ : failed_).fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
  busy_ = false;
  idle_cv_.notify_all();
}

absl::Status WebhookSender::post(const WebhookUrl& url, std::string_view body,
                                 uint64_t timeout_ms) {
  auto fd_or = connectTo(url, timeout_ms);
  if (!fd_or.ok()) return fd_or.status();
  Fd fd(*fd_or);
  std::string req = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: infergate\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n",
      url.path, url.hostHeader(), body.size());
  req.append(body);

  uint64_t deadline = common::monotonicNs() + timeout_ms * kNsPerMs;
  size_t off = 0;
  while (off < req.size()) {
    const ssize_t n = ::send(fd.get(), req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto w = waitFor(fd.get(), POLLOUT, deadline, "send"); !w.ok()) return w;
      continue;
    }
    return absl::UnavailableError(fmt::format("webhook: send: {}", std::strerror(errno)));
  }

  // The status line is all we need: "HTTP/1.x NNN ...\r\n".
  deadline = common::monotonicNs() + timeout_ms * kNsPerMs;
  std::string head;
  char buf[512];
  while (head.find("\r\n") == std::string::npos && head.size() < 4096) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      head.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (auto w = waitFor(fd.get(), POLLIN, deadline, "receive"); !w.ok()) return w;
      continue;
    }
    return absl::UnavailableError(fmt::format("webhook: receive: {}", std::strerror(errno)));
  }
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol == std::string::npos ? head.size() : eol);
  if (line.size() < 12 || line.compare(0, 7, "HTTP/1.") != 0 || line[8] != ' ')
    return absl::UnavailableError(
        fmt::format("webhook: {} answered no HTTP status line", url.hostHeader()));
  const char d0 = line[9];
  if (d0 < '1' || d0 > '5' || line[10] < '0' || line[10] > '9' || line[11] < '0' || line[11] > '9')
    return absl::UnavailableError(fmt::format("webhook: bad status line '{}'", line));
  if (d0 != '2')
    return absl::UnavailableError(
        fmt::format("webhook: {} answered '{}'", url.hostHeader(), line));
  return absl::OkStatus();
}

}  // namespace infergate::gpu
