#include "dataplane/socket_reactor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "common/clock.h"
#include "net/burst.h"
#include "spdlog/spdlog.h"

namespace infergate::dataplane {

namespace {
// epoll_event.data: a connection's Conn* (never below 4096), or one of these keys.
constexpr uint64_t kPostedKey = 0;  // the post queue's eventfd
constexpr uint64_t kListenerKey = 1;  // kListenerKey + i: listeners_[i]
}  // namespace

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
  bool received = false;     // any byte from the client yet (see kFreshDrainGraceNs)
  uint32_t events = 0;
  uint64_t accepted_ns = 0;
  uint64_t linger_deadline = 0;
  uint64_t next_tick_ns = 0;  // in the reactor's tick FIFO until destroyed
  Conn* tick_prev = nullptr;
  Conn* tick_next = nullptr;
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
  options_.tick_ns = std::max<uint64_t>(options_.tick_ns, 1);
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kPostedKey;
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
  ev.data.u64 = kListenerKey + listeners_.size();
  epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  listeners_.push_back(Listener{fd, std::move(factory), std::move(refusal)});
}

void SocketReactor::runPosted() { posted_.runAll(); }

void SocketReactor::run() {
  enterLoopThread(options_.name, options_.cpu);
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
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
      for (auto& [fd, c] : conns_) {  // idle ones close now, not at their next tick
        if (!c->dead) tickConn(*c);
      }
      drain_recheck_ns_ = freshDrainRecheck();
    } else if (draining_ && drain_recheck_ns_ != 0 && now_ns_ >= drain_recheck_ns_) {
      // A fresh connection's grace ended: close it now if its request never came.
      for (auto& [fd, c] : conns_) {
        if (!c->dead) tickConn(*c);
      }
      drain_recheck_ns_ = freshDrainRecheck();
    }
    if (draining_ && (conns_.empty() || now_ns_ >= drain_deadline_)) break;
    // Sleep until the first connection's tick, at most one period (the output budget is looked
    // at by the loop at least that often) and not past the end of a drain.
    uint64_t wait_ns = options_.tick_ns;
    if (tick_head_ != nullptr) {
      wait_ns = tick_head_->next_tick_ns > now_ns_ ? std::min(wait_ns, tick_head_->next_tick_ns - now_ns_) : 0;
    }
    if (draining_) wait_ns = std::min(wait_ns, drain_deadline_ - now_ns_);
    if (draining_ && drain_recheck_ns_ != 0) {
      wait_ns = std::min(wait_ns, drain_recheck_ns_ > now_ns_ ? drain_recheck_ns_ - now_ns_ : 0);
    }
    // Connections the drain just closed are reaped at the end of this iteration; the next one
    // then finds none left and ends the loop without waiting.
    const bool busy = !dirty_.empty() || !to_destroy_.empty();
    const int timeout_ms = !busy && wait_ns > 0 ? static_cast<int>(wait_ns / 1000000 + 1) : 0;
    const int n = epoll_wait(epfd_, events, kMaxEvents, timeout_ms);
    now_ns_ = common::monotonicNs();
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kPostedKey) {
        posted_.clearWakeup();
        continue;
      }
      if (key < kListenerKey + listeners_.size()) {
        if (Listener& l = listeners_[key - kListenerKey]; l.fd >= 0) acceptAll(l);
        continue;
      }
      // A Conn is freed only by reapDestroyed(), after this batch, and leaves epoll when it is
      // destroyed: the pointer is valid here, possibly dead.
      Conn& c = *static_cast<Conn*>(events[i].data.ptr);
      if (c.dead) continue;
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
    runDueTicks();
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
    conn->accepted_ns = now_ns_;
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
    c.next_tick_ns = nextTick();
    tickPush(c);
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
  e.data.ptr = &c;
  epoll_ctl(epfd_, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &e);
  c.events = ev == 0 ? EPOLLET : ev;  // keep "registered" distinguishable from 0
}

void SocketReactor::onReadable(Conn& c) {
  char buf[65536];
  // One read per event for fairness between connections; level-triggered epoll returns.
  const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
  if (n > 0) {
    if (c.lingering) return;  // discard
    c.received = true;
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
  tickUnlink(c);
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

void SocketReactor::runDueTicks() {
  // Deadlines in the FIFO only grow (nextTick() of a clock that only grows): the due ones are
  // at its head. A ticked connection goes back to the tail, due one period later.
  while (tick_head_ != nullptr && tick_head_->next_tick_ns <= now_ns_) {
    Conn& c = *tick_head_;
    tickUnlink(c);
    tickConn(c);
    if (!c.dead) {
      c.next_tick_ns = nextTick();
      tickPush(c);
    }
  }
}

uint64_t SocketReactor::nextTick() const {
  // One period from now, rounded up to an eighth of it: connections accepted or ticked close
  // together share a wake-up, so the loop wakes at most 8 times per period for ticks however
  // many connections it holds; each is ticked every tick_ns to tick_ns * 9/8.
  const uint64_t gran = std::max<uint64_t>(1, options_.tick_ns / 8);
  const uint64_t at = now_ns_ + options_.tick_ns;
  return (at + gran - 1) / gran * gran;
}

void SocketReactor::tickPush(Conn& c) {
  c.tick_next = nullptr;
  c.tick_prev = tick_tail_;
  if (tick_tail_ != nullptr) tick_tail_->tick_next = &c;
  else tick_head_ = &c;
  tick_tail_ = &c;
}

void SocketReactor::tickUnlink(Conn& c) {
  if (c.tick_prev == nullptr && tick_head_ != &c) return;  // not in the FIFO
  if (c.tick_prev != nullptr) c.tick_prev->tick_next = c.tick_next;
  else tick_head_ = c.tick_next;
  if (c.tick_next != nullptr) c.tick_next->tick_prev = c.tick_prev;
  else tick_tail_ = c.tick_prev;
  c.tick_prev = c.tick_next = nullptr;
}

namespace {
constexpr uint64_t kFreshDrainGraceNs = 1'000'000'000;
}  // namespace

uint64_t SocketReactor::freshDrainRecheck() const {
  // The earliest end of a held fresh connection's grace (0: none is held). Connections are not
  // accepted while draining, so this only shrinks to 0 as they are served or closed.
  uint64_t at = 0;
  for (const auto& [fd, c] : conns_) {
    if (c->dead || c->lingering || c->received) continue;
    const uint64_t end = c->accepted_ns + kFreshDrainGraceNs;
    if (at == 0 || end < at) at = end;
  }
  return at;
}

void SocketReactor::tickConn(Conn& c) {
  if (c.lingering) {
    if (now_ns_ >= c.linger_deadline) destroy(c);
    return;
  }
  // Draining: idle connections close. One accepted moments ago whose request has not arrived
  // yet is not idle to its client (a restart's new process is already accepting, and this
  // client sent its request to us): it gets kFreshDrainGraceNs for its first request, which is
  // answered like any in-flight one (closing it unread would reset it).
  if (draining_ && c.session->idle() && c.out_off == c.out.size() &&
      (c.received || now_ns_ - c.accepted_ns >= kFreshDrainGraceNs)) {
    destroy(c);
    return;
  }
  if (c.pendingBytes() > 0 && options_.output.send_timeout_ns != 0 &&
      now_ns_ - c.drain_mark_ns >= options_.output.send_timeout_ns) {
    closeForOutput(c, OutputCloseReason::kSendTimeout);
    return;
  }
  updateOutputPause(c);  // the process budget may have changed
  c.session->onTick(now_ns_);
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
