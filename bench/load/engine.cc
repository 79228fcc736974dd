#include "bench/load/engine.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <llhttp.h>
#include <nghttp2/nghttp2.h>

namespace infergate::bench {

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

constexpr uint64_t kMs = 1000000;

struct Inflight {
  uint64_t intended_ns = 0;  // latency origin
  uint64_t sent_ns = 0;      // timeout origin
  uint32_t variant = 0;
  bool measured = false;
  size_t body_off = 0;       // gRPC: bytes of the message handed to nghttp2
  int http_status = 0;
  int grpc_status = -1;
};

struct Pending {
  uint64_t intended_ns;
  uint64_t noticed_ns;
  uint32_t variant;
};

class Worker;

struct Conn {
  Worker* worker = nullptr;
  int fd = -1;
  enum class State { kClosed, kConnecting, kReady } state = State::kClosed;
  bool epollout = false;
  bool in_idle = false;
  uint64_t reconnect_at = 0;
  uint64_t connect_started = 0;
  uint64_t free_since = 0;  // when it last gained capacity for a request
  std::string out;
  size_t out_off = 0;
  // HTTP/1.1
  llhttp_t parser;
  bool busy = false;
  bool close_after = false;
  Inflight h1;
  // HTTP/2
  nghttp2_session* h2 = nullptr;
  std::unordered_map<int32_t, Inflight> streams;  // node-stable: stream user data points here
};

class Worker {
 public:
  Worker(const EngineConfig& cfg, const LoadPhase& phase, int index, int nconns,
         double rate_share, int concurrency_share, const sockaddr_storage& addr,
         socklen_t addr_len, uint64_t start_ns)
      : cfg_(cfg),
        phase_(phase),
        index_(index),
        addr_(addr),
        addr_len_(addr_len),
        start_ns_(start_ns),
        window_start_(start_ns + static_cast<uint64_t>(phase.warmup_s * 1e9)),
        window_end_(window_start_ + static_cast<uint64_t>(phase.duration_s * 1e9)),
        drain_deadline_(window_end_ + static_cast<uint64_t>(cfg.timeout_s * 1e9)),
        rng_(cfg.seed * 7919 + static_cast<uint64_t>(index)),
        concurrency_(concurrency_share),
        schedule_(phase.arrival, rate_share > 0 ? rate_share : 1,
                  cfg.seed * 104729 + static_cast<uint64_t>(index),
                  phase.arrival == Arrival::kConstant && phase.rate > 0
                      ? static_cast<uint64_t>(1e9 / phase.rate * index)
                      : 0),
        has_rate_(rate_share > 0) {
    conns_.resize(static_cast<size_t>(nconns));
    for (auto& c : conns_) {
      c = std::make_unique<Conn>();
      c->worker = this;
    }
    llhttp_settings_init(&h1_settings_);
    h1_settings_.on_message_complete = &Worker::onH1MessageComplete;
  }

  ~Worker() {
    for (auto& c : conns_) closeConn(*c, false);
    if (epfd_ >= 0) ::close(epfd_);
  }

  void run();

  // Moves what was recorded since the last call into the published copy (under the lock).
  void publish() {
    std::lock_guard<std::mutex> g(mu_);
    published_.merge(local_);
    local_.clear();
  }
  void snapshotInto(RunStats& out) {
    std::lock_guard<std::mutex> g(mu_);
    out.merge(published_);
  }
  uint64_t unfinished() const { return unfinished_; }
  bool done() const { return done_.load(std::memory_order_acquire); }  // pairs with run()'s store

 private:
  static int onH1MessageComplete(llhttp_t* p);
  static int onH2Header(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                        const uint8_t*, size_t, uint8_t, void*);
  static int onH2StreamClose(nghttp2_session*, int32_t, uint32_t, void*);
  static ssize_t readH2Body(nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*,
                            nghttp2_data_source*, void*);

  bool isH2() const { return cfg_.protocol == Protocol::kGrpc; }
  bool measured(uint64_t t) const { return t >= window_start_ && t < window_end_; }
  size_t intervalOf(uint64_t t) const { return (t - window_start_) / cfg_.interval_ns; }

  void startConnect(Conn& c, uint64_t now);
  void onConnected(Conn& c, uint64_t now);
  void closeConn(Conn& c, bool reconnect);
  void failInflight(Conn& c, const char* kind);
  void handleEvent(Conn& c, uint32_t events);
  void handleRead(Conn& c);
  bool flush(Conn& c);  // false: the connection failed (closed here)
  void setEpollOut(Conn& c, bool on);
  bool hasCapacity(const Conn& c) const;
  Conn* pickConn();
  bool send(Conn& c, uint32_t variant, uint64_t intended, uint64_t now);
  void finish(Inflight& in, const std::string& outcome, bool ok, bool responded);
  void checkTimeouts(uint64_t now);
  size_t inflightCount() const;

  const EngineConfig& cfg_;
  const LoadPhase& phase_;
  int index_;
  sockaddr_storage addr_;
  socklen_t addr_len_;
  uint64_t start_ns_, window_start_, window_end_, drain_deadline_;
  std::mt19937_64 rng_;
  int concurrency_;
  ArrivalSchedule schedule_;
  bool has_rate_;
  int epfd_ = -1;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> idle_;  // HTTP/1.1 connections ready for a request
  size_t rr_ = 0;
  std::deque<Pending> pending_;
  int outstanding_ = 0;  // closed loop: requests in flight
  llhttp_settings_t h1_settings_;
  nghttp2_session_callbacks* h2_callbacks_ = nullptr;
  RunStats local_;
  std::mutex mu_;
  RunStats published_;
  uint64_t unfinished_ = 0;
  std::atomic<bool> done_{false};
};

void Worker::setEpollOut(Conn& c, bool on) {
  if (c.epollout == on || c.fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.ptr = &c;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.epollout = on;
}

void Worker::startConnect(Conn& c, uint64_t now) {
  c.fd = ::socket(addr_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c.fd < 0) {
    ++local_.connect_errors;
    c.reconnect_at = now + 100 * kMs;
    return;
  }
  int one = 1;
  setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int r = ::connect(c.fd, reinterpret_cast<const sockaddr*>(&addr_), addr_len_);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.ptr = &c;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, c.fd, &ev);
  c.epollout = true;
  c.state = Conn::State::kConnecting;
  c.connect_started = now;
  if (r == 0) onConnected(c, now);
  else if (errno != EINPROGRESS) {
    ++local_.connect_errors;
    closeConn(c, false);
    c.reconnect_at = now + 100 * kMs;
  }
}

void Worker::onConnected(Conn& c, uint64_t now) {
  c.state = Conn::State::kReady;
  c.free_since = now;
  c.out.clear();
  c.out_off = 0;
  setEpollOut(c, false);
  if (isH2()) {
    nghttp2_session_client_new(&c.h2, h2_callbacks_, &c);
    nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                  {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1u << 24)}};
    nghttp2_submit_settings(c.h2, NGHTTP2_FLAG_NONE, s, 2);
    nghttp2_session_set_local_window_size(c.h2, NGHTTP2_FLAG_NONE, 0, 1 << 26);
    flush(c);
  } else {
    llhttp_init(&c.parser, HTTP_RESPONSE, &h1_settings_);
    c.parser.data = &c;
    c.busy = false;
    c.close_after = false;
    if (!c.in_idle) {
      idle_.push_back(&c);
      c.in_idle = true;
    }
  }
}

void Worker::closeConn(Conn& c, bool reconnect) {
  if (c.fd >= 0) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c.fd = -1;
  }
  if (c.h2) {
    nghttp2_session_del(c.h2);  // may call on_stream_close: inflight ones are failed first
    c.h2 = nullptr;
  }
  c.state = Conn::State::kClosed;
  c.epollout = false;
  if (c.in_idle) {
    idle_.erase(std::find(idle_.begin(), idle_.end(), &c));
    c.in_idle = false;
  }
  c.reconnect_at = reconnect ? 0 : c.reconnect_at;
}

void Worker::failInflight(Conn& c, const char* kind) {
  if (c.busy) {
    c.busy = false;
    finish(c.h1, kind, false, false);
  }
  for (auto& [id, in] : c.streams) {
    if (c.h2) nghttp2_session_set_stream_user_data(c.h2, id, nullptr);
    finish(in, kind, false, false);
  }
  c.streams.clear();
}

void Worker::finish(Inflight& in, const std::string& outcome, bool ok, bool responded) {
  const uint64_t now = nowNs();
  if (phase_.mode == LoadMode::kClosed) --outstanding_;
  if (now >= window_start_ && now < window_end_) local_.recordCompletion(intervalOf(now));
  if (!in.measured) return;
  const Variant& v = (*cfg_.variants)[in.variant];
  const uint64_t latency = now > in.intended_ns ? now - in.intended_ns : 0;
  if (!v.malformed.empty()) {
    ++local_.malformed[v.malformed + " " + outcome];
    if (responded) local_.malformed_latency.record(latency);
    return;
  }
  if (ok) {
    local_.recordOk(v.priority, latency, intervalOf(in.intended_ns));
  } else {
    local_.recordError(v.priority, outcome);
  }
}

int Worker::onH1MessageComplete(llhttp_t* p) {
  Conn& c = *static_cast<Conn*>(p->data);
  Worker& w = *c.worker;
  if (!c.busy) return HPE_USER;  // a response nobody asked for
  c.busy = false;
  const int status = llhttp_get_status_code(p);
  const bool ok = status >= 200 && status < 300;
  w.finish(c.h1, ok ? "ok" : fmt::format("http_{}", status), ok, true);
  if (!llhttp_should_keep_alive(p)) c.close_after = true;
  return 0;
}

void Worker::handleRead(Conn& c) {
  static thread_local char buf[1 << 18];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      failInflight(c, "reset");
      closeConn(c, true);
      return;
    }
    if (n == 0) {
      if (!isH2() && c.busy) llhttp_finish(&c.parser);  // a body delimited by the close
      failInflight(c, "reset");
      closeConn(c, true);
      return;
    }
    if (isH2()) {
      if (nghttp2_session_mem_recv(c.h2, reinterpret_cast<uint8_t*>(buf),
                                   static_cast<size_t>(n)) < 0) {
        failInflight(c, "protocol");
        closeConn(c, true);
        return;
      }
    } else {
      const llhttp_errno_t e = llhttp_execute(&c.parser, buf, static_cast<size_t>(n));
      if (e != HPE_OK) {
        failInflight(c, "protocol");
        closeConn(c, true);
        return;
      }
    }
    if (static_cast<size_t>(n) < sizeof buf) break;
  }
  if (isH2()) {
    if (!flush(c)) return;
    if (!nghttp2_session_want_read(c.h2) && !nghttp2_session_want_write(c.h2)) {
      failInflight(c, "reset");  // GOAWAY: what is left was refused
      closeConn(c, true);
    }
    return;
  }
  if (c.close_after) {
    failInflight(c, "reset");
    closeConn(c, true);
    return;
  }
  if (!c.busy && !c.in_idle) {
    c.free_since = nowNs();
    idle_.push_back(&c);
    c.in_idle = true;
  }
}

bool Worker::flush(Conn& c) {
  for (;;) {
    if (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          setEpollOut(c, true);
          return true;
        }
        if (errno == EINTR) continue;
        failInflight(c, "reset");
        closeConn(c, true);
        return false;
      }
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    c.out.clear();
    c.out_off = 0;
    if (!c.h2) break;
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(c.h2, &data);
    if (n < 0) {
      failInflight(c, "protocol");
      closeConn(c, true);
      return false;
    }
    if (n == 0) break;
    c.out.assign(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  setEpollOut(c, false);
  return true;
}

int Worker::onH2Header(nghttp2_session* s, const nghttp2_frame* frame, const uint8_t* name,
                       size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                       void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto* in = static_cast<Inflight*>(nghttp2_session_get_stream_user_data(s, frame->hd.stream_id));
  if (!in) return 0;
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  auto toInt = [](std::string_view t) {
    int x = 0;
    for (char ch : t) {
      if (ch < '0' || ch > '9') return -2;
      x = x * 10 + (ch - '0');
      if (x > 100000) return -2;
    }
    return t.empty() ? -2 : x;
  };
  if (n == ":status") in->http_status = toInt(v);
  else if (n == "grpc-status") in->grpc_status = toInt(v);
  return 0;
}

int Worker::onH2StreamClose(nghttp2_session* s, int32_t stream_id, uint32_t error_code,
                            void* user) {
  Conn& c = *static_cast<Conn*>(user);
  auto* in = static_cast<Inflight*>(nghttp2_session_get_stream_user_data(s, stream_id));
  if (!in) return 0;  // already accounted for (timeout, connection failure)
  nghttp2_session_set_stream_user_data(s, stream_id, nullptr);
  std::string outcome = "ok";
  bool ok = false, responded = true;
  if (error_code != 0) {
    outcome = "reset";
    responded = false;
  } else if (in->http_status != 200) {
    outcome = fmt::format("http_{}", in->http_status);
  } else if (in->grpc_status < 0) {
    outcome = "grpc_no_status";
  } else if (in->grpc_status != 0) {
    outcome = fmt::format("grpc_{}", in->grpc_status);
  } else {
    ok = true;
  }
  const bool was_full = !c.worker->hasCapacity(c);
  c.worker->finish(*in, outcome, ok, responded);
  c.streams.erase(stream_id);
  if (was_full) c.free_since = nowNs();  // a slot opened on a full connection
  return 0;
}

ssize_t Worker::readH2Body(nghttp2_session* s, int32_t stream_id, uint8_t* buf, size_t len,
                           uint32_t* flags, nghttp2_data_source*, void* user) {
  Conn& c = *static_cast<Conn*>(user);
  auto* in = static_cast<Inflight*>(nghttp2_session_get_stream_user_data(s, stream_id));
  if (!in) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  const std::string& bytes = (*c.worker->cfg_.variants)[in->variant].bytes;
  const size_t n = std::min(len, bytes.size() - in->body_off);
  std::memcpy(buf, bytes.data() + in->body_off, n);
  in->body_off += n;
  if (in->body_off == bytes.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

bool Worker::hasCapacity(const Conn& c) const {
  if (c.state != Conn::State::kReady) return false;
  if (!isH2()) return !c.busy;
  const uint32_t remote =
      nghttp2_session_get_remote_settings(c.h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return c.streams.size() <
         std::min<size_t>(static_cast<size_t>(cfg_.h2_max_streams), remote);
}

Conn* Worker::pickConn() {
  if (!isH2()) {
    if (idle_.empty()) return nullptr;
    Conn* c = idle_.back();
    idle_.pop_back();
    c->in_idle = false;
    return c;
  }
  for (size_t i = 0; i < conns_.size(); ++i) {
    Conn* c = conns_[(rr_ + i) % conns_.size()].get();
    if (hasCapacity(*c)) {
      rr_ = (rr_ + i + 1) % conns_.size();
      return c;
    }
  }
  return nullptr;
}

bool Worker::send(Conn& c, uint32_t variant, uint64_t intended, uint64_t now) {
  if (phase_.mode == LoadMode::kClosed) ++outstanding_;
  Inflight in;
  in.intended_ns = intended;
  in.sent_ns = now;
  in.variant = variant;
  in.measured = measured(intended);
  if (in.measured) ++local_.sent;
  const Variant& v = (*cfg_.variants)[variant];
  if (!isH2()) {
    c.h1 = in;
    c.busy = true;
    c.out.assign(v.bytes);
    c.out_off = 0;
    return flush(c);
  }
  const std::string len = std::to_string(v.bytes.size() - 5);
  auto nv = [](const char* n, const std::string& val) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n)),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(val.data())), strlen(n),
                      val.size(), NGHTTP2_NV_FLAG_NONE};
  };
  static const std::string kPost = "POST", kHttp = "http", kGrpc = "application/grpc",
                           kTrailers = "trailers";
  const std::string authority = cfg_.host + ":" + std::to_string(cfg_.port);
  nghttp2_nv hdrs[] = {nv(":method", kPost),          nv(":scheme", kHttp),
                       nv(":path", v.grpc_path),      nv(":authority", authority),
                       nv("content-type", kGrpc),     nv("te", kTrailers)};
  nghttp2_data_provider dp{};
  dp.read_callback = &Worker::readH2Body;
  const int32_t id = nghttp2_submit_request(c.h2, nullptr, hdrs, 6, &dp, nullptr);
  if (id < 0) {
    finish(in, "protocol", false, false);
    return true;
  }
  Inflight& slot = c.streams[id];
  slot = in;
  nghttp2_session_set_stream_user_data(c.h2, id, &slot);
  return flush(c);
}

void Worker::checkTimeouts(uint64_t now) {
  const uint64_t limit = static_cast<uint64_t>(cfg_.timeout_s * 1e9);
  for (auto& cp : conns_) {
    Conn& c = *cp;
    if (c.state == Conn::State::kConnecting && now > c.connect_started + limit) {
      ++local_.connect_errors;
      closeConn(c, false);
      c.reconnect_at = now + 100 * kMs;
      continue;
    }
    if (!isH2()) {
      if (c.busy && now - c.h1.sent_ns > limit) {
        failInflight(c, "timeout");
        closeConn(c, true);
      }
      continue;
    }
    bool any = false;
    const bool was_full = c.state == Conn::State::kReady && !hasCapacity(c);
    for (auto it = c.streams.begin(); it != c.streams.end();) {
      if (now - it->second.sent_ns > limit) {
        nghttp2_session_set_stream_user_data(c.h2, it->first, nullptr);
        nghttp2_submit_rst_stream(c.h2, NGHTTP2_FLAG_NONE, it->first, NGHTTP2_CANCEL);
        finish(it->second, "timeout", false, false);
        it = c.streams.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    if (any) {
      if (was_full) c.free_since = now;
      flush(c);
    }
  }
}

size_t Worker::inflightCount() const {
  size_t n = 0;
  for (const auto& c : conns_) n += (c->busy ? 1 : 0) + c->streams.size();
  return n;
}

void Worker::handleEvent(Conn& c, uint32_t events) {
  if (c.state == Conn::State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
      if (nowNs() >= window_start_ && nowNs() < window_end_) ++local_.connect_errors;
      closeConn(c, false);
      c.reconnect_at = nowNs() + 50 * kMs;
      return;
    }
    onConnected(c, nowNs());
    return;
  }
  if (c.state != Conn::State::kReady) return;
  if (events & EPOLLOUT) {
    if (!flush(c)) return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) handleRead(c);
}

void Worker::run() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake-ups to the µs, not the default 50 µs slack
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  nghttp2_session_callbacks_new(&h2_callbacks_);
  nghttp2_session_callbacks_set_on_header_callback(h2_callbacks_, &Worker::onH2Header);
  nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks_, &Worker::onH2StreamClose);
  const bool open = phase_.mode == LoadMode::kOpen;
  uint64_t now = nowNs();
  for (auto& c : conns_) startConnect(*c, now);
  uint64_t next_due = has_rate_ ? start_ns_ + schedule_.next() : UINT64_MAX;
  uint64_t last_publish = now, last_timeout_check = now;
  bool epoll_pwait2_ok = true;
  epoll_event events[256];
  for (;;) {
    now = nowNs();
    // Arrivals that are due join the backlog (open loop); closed loop starts at start_ns_.
    if (open) {
      while (next_due <= now && next_due < window_end_) {
        if (pending_.size() >= cfg_.max_backlog) {
          if (measured(next_due)) local_.recordError(-1, "backlog_overflow");
        } else {
          pending_.push_back({next_due, now, static_cast<uint32_t>(cfg_.mix->pick(rng_))});
        }
        next_due = start_ns_ + schedule_.next();
      }
      if (measured(now)) {
        local_.max_backlog = std::max<uint64_t>(local_.max_backlog, pending_.size());
      }
      while (!pending_.empty()) {
        Conn* c = pickConn();
        if (!c) break;
        const Pending p = pending_.front();
        pending_.pop_front();
        uint64_t lag = now - p.intended_ns;
        if (c->free_since > p.intended_ns) {  // it waited for a connection: not our lateness
          lag = std::max(p.noticed_ns - p.intended_ns, now - c->free_since);
          if (measured(p.intended_ns)) ++local_.queued_sends;
        }
        if (measured(p.intended_ns)) {
          local_.send_lag.record(lag);
          if (lag > cfg_.lag_threshold_ns) ++local_.late_sends;
        }
        send(*c, p.variant, p.intended_ns, now);
      }
    } else if (now >= start_ns_ && now < window_end_) {
      while (outstanding_ < concurrency_) {
        Conn* c = pickConn();
        if (!c) break;
        send(*c, static_cast<uint32_t>(cfg_.mix->pick(rng_)), now, now);
      }
    }
    if (now >= window_end_ && pending_.empty() && inflightCount() == 0) break;
    if (now >= drain_deadline_) {
      for (const Pending& p : pending_) {
        if (measured(p.intended_ns)) {
          const Variant& v = (*cfg_.variants)[p.variant];
          if (v.malformed.empty()) local_.recordError(v.priority, "unsent");
          else ++local_.malformed[v.malformed + " unsent"];
        }
        ++unfinished_;
      }
      pending_.clear();
      for (auto& c : conns_) {
        unfinished_ += (c->busy ? 1 : 0) + c->streams.size();
        failInflight(*c, "timeout");
      }
      break;
    }
    for (auto& c : conns_) {
      if (c->state == Conn::State::kClosed && c->reconnect_at <= now && now < drain_deadline_) {
        startConnect(*c, now);
      }
    }
    if (now - last_timeout_check >= 10 * kMs) {
      checkTimeouts(now);
      last_timeout_check = now;
    }
    if (now - last_publish >= 200 * kMs) {
      publish();
      last_publish = now;
    }
    uint64_t wait = 10 * kMs;
    if (open && next_due < window_end_) wait = std::min(wait, next_due > now ? next_due - now : 0);
    if (!open && now < start_ns_) wait = std::min(wait, start_ns_ - now);
    int n;
    if (epoll_pwait2_ok) {
      timespec ts{static_cast<time_t>(wait / 1000000000ull), static_cast<long>(wait % 1000000000ull)};
      n = epoll_pwait2(epfd_, events, 256, &ts, nullptr);
      if (n < 0 && errno == ENOSYS) {
        epoll_pwait2_ok = false;
        continue;
      }
    } else {
      n = epoll_wait(epfd_, events, 256, static_cast<int>((wait + kMs - 1) / kMs));
    }
    for (int i = 0; i < n; ++i) {
      handleEvent(*static_cast<Conn*>(events[i].data.ptr), events[i].events);
    }
  }
  for (auto& c : conns_) closeConn(*c, false);
  nghttp2_session_callbacks_del(h2_callbacks_);
  publish();
  done_.store(true, std::memory_order_release);  // pairs with done()
}

}  // namespace

absl::StatusOr<PhaseResult> runPhase(const EngineConfig& cfg, const LoadPhase& phase,
                                     const std::function<void(const Progress&)>& progress) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(cfg.port);
  if (int rc = getaddrinfo(cfg.host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res) {
    return absl::InvalidArgumentError(
        fmt::format("cannot resolve target '{}': {}", cfg.host, gai_strerror(rc)));
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  const socklen_t addr_len = res->ai_addrlen;
  freeaddrinfo(res);

  const int threads = std::max(1, std::min(cfg.threads, cfg.connections));
  const uint64_t start = nowNs() + 100 * kMs;  // connections are opened before the first send
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < threads; ++i) {
    const int conns = cfg.connections / threads + (i < cfg.connections % threads ? 1 : 0);
    const int conc = phase.concurrency / threads + (i < phase.concurrency % threads ? 1 : 0);
    workers.push_back(std::make_unique<Worker>(
        cfg, phase, i, conns, phase.mode == LoadMode::kOpen ? phase.rate / threads : 0.0, conc,
        addr, addr_len, start));
  }
  std::vector<std::thread> ts;
  for (auto& w : workers) ts.emplace_back([&w] { w->run(); });
  auto allDone = [&] {
    for (auto& w : workers) {
      if (!w->done()) return false;
    }
    return true;
  };
  const uint64_t window_start = start + static_cast<uint64_t>(phase.warmup_s * 1e9);
  uint64_t next_tick = nowNs() + 1000 * kMs;
  while (!allDone()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t now = nowNs();
    if (progress && now >= next_tick) {
      next_tick += 1000 * kMs;
      Progress p;
      p.elapsed_s = static_cast<double>(now - std::min(now, start)) / 1e9;
      p.warming_up = now < window_start;
      for (auto& w : workers) w->snapshotInto(p.stats);
      p.completed = p.stats.completed_in_window;
      progress(p);
    }
  }
  for (auto& t : ts) t.join();
  PhaseResult r;
  for (auto& w : workers) {
    w->snapshotInto(r.stats);
    r.unfinished += w->unfinished();
  }
  r.measured_s = phase.duration_s;
  r.elapsed_s = static_cast<double>(nowNs() - start) / 1e9;
  return r;
}

}  // namespace infergate::bench
