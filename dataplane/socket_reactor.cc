#include "dataplane/socket_reactor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "common/clock.h"
#include "net/burst.h"
#include "spdlog/spdlog.h"

namespace infergate::dataplane {

absl::StatusOr<int> openListener(const std::string& address, uint16_t port, uint16_t* bound_port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError("listener address '" + address +
                                      "' is not an IPv4 or IPv6 literal");
  }
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::string("socket(): ") + strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError("cannot listen on " + address + ":" + std::to_string(port) +
                                  ": " + strerror(e) +
                                  (e == EADDRINUSE ? " (another process uses the port; change listeners[].port)"
                                                   : ""));
  }
  if (listen(fd, 4096) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError("listen() on " + address + ":" + std::to_string(port) + ": " +
                                  strerror(e));
  }
  sockaddr_storage actual{};
  socklen_t alen = sizeof actual;
  getsockname(fd, reinterpret_cast<sockaddr*>(&actual), &alen);
  if (bound_port != nullptr) {
    *bound_port = actual.ss_family == AF_INET
                      ? ntohs(reinterpret_cast<sockaddr_in*>(&actual)->sin_port)
                      : ntohs(reinterpret_cast<sockaddr_in6*>(&actual)->sin6_port);
  }
  return fd;
}

// One accepted connection: the Transport its session writes to.
struct SocketReactor::Conn final : net::Transport {
  SocketReactor* reactor;
  int fd;
  std::shared_ptr<net::Session> session;
  std::string out;
  size_t out_off = 0;
  bool want_close = false;
  bool lingering = false;
  bool read_paused = false;  // by the session
  bool out_paused = false;   // by the output limits (queue too long)
  bool peer_closed = false;
  bool dirty = false;
  bool dead = false;
  uint32_t events = 0;
  uint64_t linger_deadline = 0;
  // Send timeout: the queue must drain min_drain_bytes every send_timeout_ns. `drain_mark_ns`
  // starts a period, `drained` counts what the kernel took since.
  uint64_t drain_mark_ns = 0;
  uint64_t drained = 0;
  OutputCloseReason close_for = OutputCloseReason::kNone;  // closed at the end of the iteration
  sockaddr_storage peer{};   // the client
  sockaddr_storage local{};  // filled only when an ingress tag lookup is configured

  void send(std::string_view bytes) override {
    if (lingering || dead || bytes.empty()) return;
    const OutputLimits& lim = reactor->options_.output;
    if (close_for == OutputCloseReason::kNone) close_for = lim.refuse(pendingBytes(), bytes.size());
    if (close_for != OutputCloseReason::kNone) {
      // Refused: the connection is reset at the end of this iteration (not here: the session
      // is in the middle of a call). What it queued is counted as lost.
      if (reactor->options_.metrics) reactor->options_.metrics->output_discarded_bytes.inc(bytes.size());
      markDirty();
      return;
    }
    if (out_off == out.size()) {
      out.clear();
      out_off = 0;
      drain_mark_ns = reactor->now_ns_;
      drained = 0;
    }
    out.append(bytes);
    if (lim.used != nullptr) lim.used->add(static_cast<int64_t>(bytes.size()));
    markDirty();
    reactor->updateOutputPause(*this);
  }
  void closeAfterFlush() override {
    want_close = true;
    markDirty();
  }
  void pauseReading(bool paused) override {
    read_paused = paused;
    reactor->updateEvents(*this);
  }
  net::Loop& loop() override { return *reactor; }
  size_t pendingBytes() const override { return out.size() - out_off; }
  std::optional<net::IngressTag> ingressTag() override {
    if (!reactor->options_.tag_lookup) return std::nullopt;
    return reactor->options_.tag_lookup(peer, local);
  }
  std::optional<common::IpBytes> peerAddress() const override {
    return common::ipFromSockaddr(reinterpret_cast<const sockaddr*>(&peer));
  }
  void markDirty() {
    if (!dirty) {
      dirty = true;
      reactor->dirty_.push_back(this);
    }
  }
};

SocketReactor::SocketReactor(ReactorOptions options)
    : ReactorThread(options.index), options_(std::move(options)) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = posted_.fd();
  epoll_ctl(epfd_, EPOLL_CTL_ADD, posted_.fd(), &ev);
  now_ns_ = common::monotonicNs();
}

SocketReactor::~SocketReactor() {
  stop(0);
  join();
  for (Listener& l : listeners_) {
    if (l.fd >= 0) close(l.fd);
  }
  close(epfd_);
}

const std::string SocketReactor::kHttpRefusal =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    "Content-Length: 57\r\nConnection: close\r\n\r\n"
    "{\"error\":\"too many connections (limits.max_connections)\"}";

void SocketReactor::addListener(int fd, net::SessionFactory factory, std::string refusal) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  listeners_.push_back(Listener{fd, std::move(factory), std::move(refusal)});
}

void SocketReactor::runPosted() { posted_.runAll(); }

void SocketReactor::run() {
  enterLoopThread(options_.name, options_.cpu);
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  last_tick_ = common::monotonicNs();
  for (;;) {
    now_ns_ = common::monotonicNs();
    if (stop_requested_.load(std::memory_order_relaxed) && !draining_) {
      draining_ = true;
      drain_deadline_ = now_ns_ + drain_ns_.load(std::memory_order_relaxed);
      for (Listener& l : listeners_) {
        epoll_ctl(epfd_, EPOLL_CTL_DEL, l.fd, nullptr);
        close(l.fd);
        l.fd = -1;
      }
      for (auto& [fd, c] : conns_) {
        if (!c->dead && !c->lingering) c->session->onDrain();
      }
      tick();
    }
    if (draining_ && (conns_.empty() || now_ns_ >= drain_deadline_)) break;
    const uint64_t next_tick = last_tick_ + options_.tick_ns;
    const int timeout_ms =
        dirty_.empty() ? static_cast<int>(next_tick > now_ns_ ? (next_tick - now_ns_) / 1000000 + 1 : 0) : 0;
    const int n = epoll_wait(epfd_, events, kMaxEvents, timeout_ms);
    now_ns_ = common::monotonicNs();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == posted_.fd()) {
        posted_.clearWakeup();
        continue;
      }
      bool is_listener = false;
      for (Listener& l : listeners_) {
        if (l.fd == fd) {
          is_listener = true;
          acceptAll(l);
        }
      }
      if (is_listener) continue;
      auto it = conns_.find(fd);
      if (it == conns_.end() || it->second->dead) continue;
      Conn& c = *it->second;
      const uint32_t e = events[i].events;
      // While paused, EPOLLIN and EPOLLRDHUP are not asked for; a stale one from this batch is
      // ignored (reading would hand the session data it paused). Errors are always handled.
      const bool paused = (c.read_paused || c.out_paused) && !c.lingering;
      if ((e & (EPOLLHUP | EPOLLERR)) || (!paused && (e & (EPOLLIN | EPOLLRDHUP)))) onReadable(c);
      if (!c.dead && (e & EPOLLOUT)) onWritable(c);
    }
    runPosted();
    net::runBurstEnd();  // models dispatch what this iteration enqueued (net/burst.h)
    flushDirty();
    if (now_ns_ - last_tick_ >= options_.tick_ns) tick();
    reapDestroyed();
  }
  // Drained or out of time: close what is left.
  for (auto& [fd, c] : conns_) {
    if (!c->dead) destroy(*c);
  }
  dirty_.clear();
  reapDestroyed();
  runPosted();  // completions that raced the close find their sessions gone
  net::runBurstEnd();
}

void SocketReactor::acceptAll(Listener& l) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage peer{};  // the client's address comes with the accept, no extra call
    socklen_t peer_len = sizeof peer;
    const int fd = accept4(l.fd, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("{} {}: accept(): {}", options_.name, options_.index, strerror(errno));
      }
      return;
    }
    const uint64_t open = options_.connections ? options_.connections->fetch_add(1) + 1 : 0;
    if (options_.connections && open > options_.max_connections) {
      options_.connections->fetch_sub(1);
      if (options_.metrics) options_.metrics->connections_refused.inc();
      if (!l.refusal.empty()) {
        [[maybe_unused]] ssize_t w = ::send(fd, l.refusal.data(), l.refusal.size(), MSG_NOSIGNAL);
      }
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto conn = std::make_unique<Conn>();
    conn->reactor = this;
    conn->fd = fd;
    Conn& c = *conn;
    c.peer = peer;
    if (options_.tag_lookup) {
      socklen_t len = sizeof c.local;
      getsockname(fd, reinterpret_cast<sockaddr*>(&c.local), &len);
    }
    conns_[fd] = std::move(conn);
    conn_count_.fetch_add(1, std::memory_order_relaxed);
    if (options_.metrics) {
      options_.metrics->connections_total.inc();
      options_.metrics->connections_active.add(1);
    }
    c.session = l.factory(c);
    updateEvents(c);
  }
}

void SocketReactor::updateEvents(Conn& c) {
  if (c.dead) return;
  // Paused: neither EPOLLIN nor EPOLLRDHUP (level-triggered, a FIN would wake the loop for
  // nothing); the FIN is read when reading resumes.
  const bool paused = (c.read_paused || c.out_paused) && !c.lingering;
  uint32_t ev = paused ? 0u : static_cast<uint32_t>(EPOLLRDHUP);
  if (!paused && !c.peer_closed) ev |= EPOLLIN;
  if (c.out_off < c.out.size()) ev |= EPOLLOUT;
  if (c.peer_closed && !(ev & EPOLLOUT)) ev &= ~EPOLLRDHUP;  // nothing more to learn
  if ((ev == 0 ? static_cast<uint32_t>(EPOLLET) : ev) == c.events) return;
  epoll_event e{};
  e.events = ev;
  e.data.fd = c.fd;
  epoll_ctl(epfd_, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &e);
  c.events = ev == 0 ? EPOLLET : ev;  // keep "registered" distinguishable from 0
}

void SocketReactor::onReadable(Conn& c) {
  char buf[65536];
  // One read per event for fairness between connections; level-triggered epoll returns.
  const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
  if (n > 0) {
    if (c.lingering) return;  // discard
    c.session->onData(buf, static_cast<size_t>(n));
    return;
  }
  if (n == 0) {
    if (c.lingering) {
      destroy(c);
      return;
    }
    c.peer_closed = true;
    updateEvents(c);
    c.session->onPeerClosed();
    return;
  }
  if (errno == EAGAIN || errno == EINTR) return;
  destroy(c);  // ECONNRESET and friends
}

void SocketReactor::onWritable(Conn& c) {
  if (writeOut(c)) updateEvents(c);
}

void SocketReactor::flushDirty() {
  // Sessions may mark more connections dirty while we write (none do today); index loop.
  for (size_t i = 0; i < dirty_.size(); ++i) {
    Conn* c = dirty_[i];
    c->dirty = false;
    if (c->dead) continue;
    if (c->close_for != OutputCloseReason::kNone) {
      closeForOutput(*c, c->close_for);
      continue;
    }
    if (writeOut(*c)) updateEvents(*c);
  }
  dirty_.clear();
}

bool SocketReactor::writeOut(Conn& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      if (options_.output.used != nullptr) options_.output.used->sub(n);
      c.drained += static_cast<uint64_t>(n);
      if (c.drained >= options_.output.min_drain_bytes) {  // enough progress: a new period
        c.drain_mark_ns = now_ns_;
        c.drained = 0;
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      updateOutputPause(c);
      return true;
    }
    destroy(c);
    return false;
  }
  c.out.clear();
  c.out_off = 0;
  updateOutputPause(c);
  if (c.want_close && !c.lingering) {
    beginLinger(c);
    return !c.dead;
  }
  return true;
}

void SocketReactor::beginLinger(Conn& c) {
  // Everything was sent: half-close and keep draining what the peer still sends, so that
  // unread data does not turn our close into a reset that destroys the response in flight.
  c.lingering = true;
  c.session->onClosed();
  if (c.peer_closed) {
    destroy(c);
    return;
  }
  shutdown(c.fd, SHUT_WR);
  c.linger_deadline = now_ns_ + options_.linger_ns;
  c.read_paused = false;
  updateEvents(c);
}

void SocketReactor::destroy(Conn& c) {
  if (c.dead) return;
  c.dead = true;
  if (const size_t lost = c.pendingBytes(); lost > 0) {  // accepted, never sent: counted
    if (options_.output.used != nullptr) options_.output.used->sub(static_cast<int64_t>(lost));
    if (options_.metrics) options_.metrics->output_discarded_bytes.inc(lost);
    c.out.clear();
    c.out_off = 0;
  }
  if (!c.lingering && c.session) c.session->onClosed();
  epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
  // close() waits for the end of the loop iteration (reapDestroyed) so that the fd number is
  // not reused while this Conn may still be referenced (dirty list, event batch).
  conn_count_.fetch_sub(1, std::memory_order_relaxed);
  if (options_.connections) options_.connections->fetch_sub(1);
  if (options_.metrics) options_.metrics->connections_active.sub(1);
  to_destroy_.push_back(c.fd);
}

void SocketReactor::reapDestroyed() {
  for (int fd : to_destroy_) {
    conns_.erase(fd);
    close(fd);
  }
  to_destroy_.clear();
}

void SocketReactor::tick() {
  last_tick_ = now_ns_;
  for (auto& [fd, c] : conns_) {
    if (c->dead) continue;
    if (c->lingering) {
      if (now_ns_ >= c->linger_deadline) destroy(*c);
      continue;
    }
    if (draining_ && c->session->idle() && c->out_off == c->out.size()) {
      destroy(*c);
      continue;
    }
    if (c->pendingBytes() > 0 && options_.output.send_timeout_ns != 0 &&
        now_ns_ - c->drain_mark_ns >= options_.output.send_timeout_ns) {
      closeForOutput(*c, OutputCloseReason::kSendTimeout);
      continue;
    }
    updateOutputPause(*c);  // the process budget may have changed
    c->session->onTick(now_ns_);
  }
}

void SocketReactor::updateOutputPause(Conn& c) {
  if (c.dead || c.lingering) return;
  const OutputLimits& lim = options_.output;
  const size_t pending = c.pendingBytes();
  const bool want = (lim.pauseBytes() != 0 && pending >= lim.pauseBytes()) ||
                    (pending > 0 && lim.globalPause());
  if (want == c.out_paused) return;
  c.out_paused = want;
  if (want && options_.metrics) options_.metrics->output_read_pauses.inc();
  updateEvents(c);
}

void SocketReactor::closeForOutput(Conn& c, OutputCloseReason why) {
  if (options_.metrics) {
    switch (why) {
      case OutputCloseReason::kSendTimeout: options_.metrics->send_timeouts.inc(); break;
      case OutputCloseReason::kConnectionLimit: options_.metrics->output_limit_closes.inc(); break;
      case OutputCloseReason::kProcessLimit: options_.metrics->output_process_closes.inc(); break;
      case OutputCloseReason::kNone: break;
    }
  }
  // A reset: the kernel drops what it still holds for the peer instead of keeping an orphan
  // socket with a full send buffer.
  const linger lg{1, 0};
  setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  destroy(c);
}

}  // namespace infergate::dataplane
